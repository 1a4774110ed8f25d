"""Subcommands of the `translator` command line, one module each.

Each exposes `register(subparsers)` (the `translator.commands` entry-point group) and
imports TensorFlow inside its handler only, so `--help` is instant.
"""
