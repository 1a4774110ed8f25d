"""Tests of the commands (translator/commands): translate, evaluate, data, build-vocab.

`translator score` is tested with what it runs, in tests/evaluation.
"""
