"""Tests of the scoring and reports (translator/evaluation)."""
