"""Benchmarks: `python -m bench.<name>`; each writes its own section of bench/RESULTS.md."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before any benchmark imports TensorFlow
