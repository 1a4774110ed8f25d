"""A short run of bench/serving.py (slow: an export, two servers and 16 clients)."""

import pytest

from bench import harness


@pytest.mark.slow
def test_serving_benchmark_short_run(multi30k, capsys):
    from bench.serving import main

    assert main(["--short", "--data", str(multi30k), "--single", "2"]) == 0
    out = capsys.readouterr().out
    (target,) = harness.parse_targets(out)
    assert target["unit"] == "x" and target["measured"] > 0
    assert "2/2 sequential translations identical across modes" in out
