"""Subcommands of the `translator` command line, one module each.

Each module exposes `register(subparsers)`, listed under the `translator.commands`
entry-point group in pyproject.toml. Modules import TensorFlow inside their handlers
only, so `translator --help` answers instantly.
"""
