"""Tests of the translate, evaluate and score commands."""
