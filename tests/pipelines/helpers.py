"""Transitional: tests/bench still imports `find_multi30k` from here; it lives in
`tests.support.corpora`. Delete this module once tests/bench imports from there."""

from tests.support.corpora import find_multi30k

__all__ = ["find_multi30k"]
