"""A smoke run of bench/serving.py (slow: two servers and 16 clients)."""

import pytest


@pytest.mark.slow
def test_serving_benchmark_short_run(exported, capsys):
    from bench.pipeline import find_data
    from bench.results import parse_targets
    from bench.serving import main

    try:
        find_data(None)
    except SystemExit:
        pytest.skip("Multi30k not found (the benchmark translates its test set)")
    assert main(["--short", "--export", str(exported.base), "--single", "2"]) == 0
    out = capsys.readouterr().out
    (target,) = parse_targets(out)
    assert target["unit"] == "x" and target["measured"] > 0
    assert "2/2 sequential translations identical across modes" in out
