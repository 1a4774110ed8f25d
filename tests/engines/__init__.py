"""Tests of the decoding engines (translator/engines)."""
