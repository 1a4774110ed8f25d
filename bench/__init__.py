"""Benchmarks: `python -m bench.<name>`; each writes its own section of bench/RESULTS.md."""
