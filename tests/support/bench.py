"""The fixed footer the benchmarks' template tests render with (no TensorFlow, no clock)."""

# What `bench.harness` would print as the command, the date and the machine.
COMMAND, DATE, MACHINE = "python -m bench.x --flag", "2026-01-02 03:04 UTC", "2 cores, a CPU"
