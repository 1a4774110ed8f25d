import json

from bench.peers import AUTO, FLOAT32, PEER, peer_rates, peers_markdown, ratios

# Lines as OpenNMT-tf 2.32 logs them (from a run of bench.peers), with other lines around.
LOG = """\
2026-11-23 10:19:01.576000: I training.py:176] Saved checkpoint run/ckpt-1
2026-11-23 10:19:29.010000: I runner.py:310] Step = 20 ; steps/s = 0.70, tokens/s = 4822 \
(2289 source, 2533 target) ; Learning rate = 0.000179 ; Loss = 8.411479
2026-11-23 10:19:56.808000: I runner.py:310] Step = 40 ; steps/s = 0.72, tokens/s = 4969 \
(2358 source, 2611 target) ; Learning rate = 0.000349 ; Loss = 7.122755
2026-11-23 10:20:24.100000: I runner.py:310] Step = 60 ; steps/s = 0.73, tokens/s = 5001 \
(2370 source, 2631 target) ; Learning rate = 0.000520 ; Loss = 6.5
"""


def test_peer_rates_are_the_logged_target_rates_without_the_first_report():
    assert peer_rates(LOG) == [2611.0, 2631.0]
    assert peer_rates("no training lines") == []


def test_the_section_shows_each_round_and_the_ratios_of_the_means():
    ours = [{"tokens_per_second": 3000.0, "reports": 9, "precision": "float32"}] * 2
    auto = [{"tokens_per_second": 6000.0, "reports": 9, "precision": "mixed_bfloat16"}] * 2
    peer = [
        {"tokens_per_second": 1500.0, "reports": 5, "precision": "float32"},
        {"tokens_per_second": 2500.0, "reports": 5, "precision": "float32"},
    ]
    runs = {FLOAT32: ours, AUTO: auto, PEER: peer}
    mfu = {FLOAT32: 0.6, AUTO: 0.45, PEER: 0.4}
    text = peers_markdown(runs, mfu, 3.0, 400.0, "mixed_bfloat16")
    row = "| 1 | 3,000 (9 reports, float32) | 6,000 (9 reports, mixed_bfloat16) | 1,500 (5 reports"
    assert row + ", float32) | 2.00x | 4.00x |" in text
    assert "| **mean** | **3,000** | **6,000** | **2,000** | **1.50x** | **3.00x** |" in text
    assert "| **MFU** | 60% | 45% | 40% | | |" in text
    assert "goal >= 1.5x: **meets**" in text and "goal >= 2.0x: **meets**" in text
    assert ratios(runs) == {"float32": 1.5, "default": 3.0}


def test_where_auto_is_float32_the_float32_side_is_the_default_too():
    ours = [{"tokens_per_second": 3000.0, "reports": 9, "precision": "float32"}]
    peer = [{"tokens_per_second": 2500.0, "reports": 5, "precision": "float32"}]
    runs = {FLOAT32: ours, PEER: peer}
    assert ratios(runs) == {"float32": 1.2, "default": 1.2}
    text = peers_markdown(runs, {FLOAT32: 0.6, PEER: 0.5}, 3.0, 400.0, "float32")
    assert "`auto` is float32 on this CPU" in text
    assert "| 1 | 3,000 (9 reports, float32) | 2,500 (5 reports, float32) | 1.20x | 1.20x |" in text
    assert "**misses (1.20x)**" in text and "ours float32 (target tok/s) | OpenNMT" in text


def test_a_partial_bench_run_keeps_the_other_benchmarks_rows():
    from bench.__main__ import kept_note, kept_rows

    previous = """## Summary: the targets

| benchmark | target | measured | goal | met |
|---|---|---|---|---|
| pipeline | pipeline target tokens/s over the training goal | 47.82 x | >= 20.00 x | **yes** |
| quality | test_2016_flickr BLEU, beam 4 | 34.61 BLEU | >= 38.00 BLEU | **no** |
| decoding (trained model) | decoding beam 4 tok/s | 741 tok/s | >= 750 tok/s | **no** |

- Started: 2026-11-22 00:58 UTC
"""
    rows, origins = kept_rows(previous, {"quality", "peers"})
    assert [row.split("|")[1].strip() for row in rows] == ["pipeline", "decoding (trained model)"]
    start = "2026-11-22 00:58 UTC"
    assert origins == dict.fromkeys(["pipeline", "decoding (trained model)"], start)
    assert kept_rows(previous, {"pipeline", "quality", "decoding"}) == ([], {})
    assert kept_rows(None, {"quality"}) == ([], {})

    # A row kept once keeps its own origin when kept again, not the previous run's.
    recorded = {"pipeline": "2026-11-20 10:00 UTC (`python -m bench`)"}
    later = previous.replace("- Started: 2026-11-22 00:58 UTC", "- Started: 2026-11-23 09:00 UTC")
    later += f"<!-- provenance: {json.dumps(recorded)} -->\n"
    _, origins = kept_rows(later, {"quality"})
    assert origins == {
        "pipeline": "2026-11-20 10:00 UTC (`python -m bench`)",
        "decoding (trained model)": "2026-11-23 09:00 UTC",
    }
    note = kept_note(origins)
    assert "the pipeline rows from the run started 2026-11-20 10:00 UTC" in note
    assert "the decoding (trained model) rows from the run started 2026-11-23 09:00 UTC" in note


def test_our_rates_are_the_progress_lines_without_the_first():
    from bench.peers import our_rates

    log = "\n".join(
        [
            "2026-11-23 14:54:00,602 training.callbacks: step 20/~234 (8%) | loss 5.355 | "
            "lr 4.12e-03 | 5,700 target tok/s | 31s elapsed, ~1m29s left",
            "2026-11-23 14:54:00,900 training.callbacks: saved runs/x/checkpoints/ckpt-20",
            "2026-11-23 14:54:25,143 training.callbacks: step 40/~232 (17%) | loss 4.881 | "
            "lr 2.97e-03 | 7,267 target tok/s | 56s elapsed, ~1m04s left",
            "2026-11-23 14:54:46,705 training.callbacks: step 60/~241 (25%) | loss 4.672 | "
            "lr 1.97e-03 | 812 target tok/s | 1m17s elapsed, ~43s left",
        ]
    )
    assert our_rates(log) == [7267.0, 812.0]
    assert our_rates("no progress lines") == []
