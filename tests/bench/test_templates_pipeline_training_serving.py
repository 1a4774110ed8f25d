"""The pipeline, training and serving sections: the words from their templates, the figures
from the run (made up here: no benchmark runs)."""

import argparse
import re
import types
from pathlib import Path

import pytest

from bench import harness, pipeline, serving, training
from training.engines import tf_strategy as training_strategy

REPO = Path(__file__).resolve().parents[2]
MODULES = {"pipeline": pipeline, "training": training, "serving": serving}
# Serving's section quotes a request body; every other brace would be a field left unfilled.
REQUEST_BODY = '`{"instances": [sentence]}`'


def fake_run_context(monkeypatch, module):
    """The command, date and machine of the footer, fixed (no TensorFlow import)."""
    monkeypatch.setattr(harness, "command_line", lambda: "python -m bench.x --flag")
    monkeypatch.setattr(harness, "today", lambda: "2026-01-02 03:04 UTC")
    monkeypatch.setattr(harness, "machine_summary", lambda: "2 cores (nproc), FAKE CPU")


def assert_filled(text: str) -> None:
    assert not re.search(r"[{}]", text.replace(REQUEST_BODY, "")), "a field was left unfilled"


# ---- pipeline -------------------------------------------------------------------------------

PIPELINE_CONFIG = types.SimpleNamespace(
    batch_tokens=4096,
    bucket_width=4,
    max_source_length=256,
    max_target_length=250,
    shuffle_buffer_size=100000,
)
# Per epoch: seconds, target tokens, source tokens, padded target positions, batches, pairs.
EPOCHS = [
    (2.0, 480_000, 450_000, 600_000, 141, 29_000),
    (1.0, 480_000, 460_000, 600_000, 141, 29_000),
    (1.0, 480_000, 460_000, 600_000, 141, 29_000),
]


def test_the_pipeline_section_holds_the_run_figures(monkeypatch):
    fake_run_context(monkeypatch, pipeline)
    monkeypatch.setattr(harness, "LOAD_AT_START", "1.1/1.6")
    text = pipeline.section_markdown(PIPELINE_CONFIG, 8000, 3.84, EPOCHS, 2.744)
    assert text.startswith("## Input pipeline (`bench/pipeline.py`)")
    assert "Goal: at least 20x the\ntraining step's consumption of 5,400 target tok/s" in text
    assert "i.e. 108,000 target tok/s." in text
    assert "| **steady state, target tokens/s** (epochs 2-3) | **480,000** |" in text
    assert "| ratio to the training rate (5,400 tok/s) | **88.9x** (meets 20x) |" in text
    assert "| steady state, source tokens/s | 460,000 |" in text
    assert "| epoch 1 (cold iterator), target tokens/s | 240,000 |" in text
    assert "| 480,000 in 141 batches |" in text
    assert "| real / padded target positions | 80.0% |" in text
    assert "| 2.74 s |" in text
    assert (
        "- Settings: `PipelineConfig(batch_tokens=4096, bucket_width=4, max_source_length=256, "
        "max_target_length=250, shuffle_buffer_size=100000)`"
    ) in text
    assert "- Vocabulary: joint unigram, 8,000 ids, trained in 3.8 s\n" in text
    assert "- Command: `python -m bench.x --flag`\n- Date: 2026-01-02 03:04 UTC\n" in text
    assert "- Machine: 2 cores (nproc), FAKE CPU; load average 1.1/1.6 at the start" in text
    assert_filled(text)


def test_the_pipeline_section_of_a_missed_target(monkeypatch):
    fake_run_context(monkeypatch, pipeline)
    slow = [(seconds * 10, *rest) for seconds, *rest in EPOCHS[:2]]  # 48,000 tok/s
    text = pipeline.section_markdown(PIPELINE_CONFIG, 16000, 12.0, slow, 1.0)
    assert "(epochs 2-2) | **48,000** |" in text and "**8.9x** (MISSES 20x)" in text
    assert "- Vocabulary: joint unigram, 16,000 ids, trained in 12.0 s\n" in text
    assert_filled(text)


# ---- training -------------------------------------------------------------------------------


def training_runs(rates: list[float]) -> list[dict]:
    """Made-up runs of the full variant list (auto: mixed_bfloat16)."""
    runs = []
    for i, variant in enumerate(training.variants("mixed_bfloat16", short=False)):
        flops = 45.2e6 if variant.shape == "small" else 14.1e6
        rate = rates[i]
        runs.append(
            {
                "variant": variant,
                "tokens_per_second": rate,
                "model_flops_per_second": rate * flops,
                "warmup_seconds": 3.0 + i,
                "steps": 40,
                "flops_per_target_token": flops,
            }
        )
    return runs


PEAKS = {"float32": 100e9, "mixed_bfloat16": 50e9}


@pytest.fixture
def native_bfloat16(monkeypatch):
    answer = {"native": True}
    monkeypatch.setattr(training_strategy, "cpu_has_native_bfloat16", lambda: answer["native"])
    return answer


def test_the_training_table_has_a_row_per_variant():
    runs = training_runs([5000, 6000, 9000, 10000, 9500, 10000, 10500, 9000, 10200, 8000, 8800])
    table = training.throughput_table(runs, PEAKS)
    lines = table.splitlines()
    assert lines[0].startswith("| shape | variant | target tokens/s | vs the shape's first row |")
    assert lines[1] == "|---|---|---|---|---|---|---|---|"
    assert len(lines) == 2 + len(runs)
    # 5,000 tok/s x 45.2 MFLOP = 226 GFLOP/s of a 100 GFLOP/s matmul
    assert lines[2] == "| small | float32 | **5,000** | 1.00x | 226.0 | 100 | 226% | 3.0 s |"
    assert lines[3] == "| small | mixed_bfloat16 | **6,000** | 1.20x | 271.2 | 50 | 542% | 4.0 s |"
    assert "| narrow | mixed_bfloat16, buckets of 8 | **10,200** | 1.13x |" in table
    assert_filled(table)


def test_the_training_section_holds_the_run_figures(monkeypatch, native_bfloat16):
    fake_run_context(monkeypatch, training)
    runs = training_runs([5000, 6000, 9000, 10000, 9000, 10000, 10500, 9000, 10400, 8000, 8800])
    table = training.throughput_table(runs, PEAKS)
    text = training.training_markdown(runs, PEAKS, "mixed_bfloat16", 10, 40, table)
    assert text.startswith("## Training step (`bench/training.py`)")
    assert "one process, 40 timed steps per variant after 10\nuntimed ones; a variant" in text
    assert f"\n\n{table}\n\n" in text
    assert "picks **mixed_bfloat16** on this CPU: it\n  has native bfloat16" in text
    assert "runs at\n  50 GFLOP/s against 100 in float32" in text
    assert (
        "- Against the default step (narrow, mixed_bfloat16, 10,000 tok/s): plain step, 6 "
        "static shapes 0.90x, XLA step, 6 static shapes 1.00x, 4 steps per execution 1.05x, "
        "buckets of 2 0.90x, buckets of 8 1.04x; faster than the default: mixed_bfloat16, 4 "
        "steps per execution, mixed_bfloat16, buckets of 8. The XLA step"
    ) in text
    assert (
        "warm-up). On the same static shapes, the XLA step's speed over the plain step's: "
        "1.10x in float32, 1.11x in mixed_bfloat16."
    ) in text
    assert "(0 in this run)" in text
    assert "- Model FLOPs: small 45.2, narrow 14.1 MFLOP\n" in text
    assert "- Command: `python -m bench.x --flag`\n- Date: 2026-01-02 03:04 UTC\n" in text
    assert text.endswith("- Machine: 2 cores (nproc), FAKE CPU")
    assert_filled(text)


def test_the_training_verdict_when_none_is_faster_or_no_default_ran(monkeypatch, native_bfloat16):
    fake_run_context(monkeypatch, training)
    native_bfloat16["native"] = False
    runs = training_runs([5000, 6000, 9000, 10000, 9000, 10000, 10200, 9000, 10300, 8000, 8000])
    text = training.training_markdown(runs, PEAKS, "mixed_bfloat16", 10, 40, "TABLE")
    assert "it\n  does not have native bfloat16 instructions" in text
    assert "1.02x, buckets of 2 0.90x, buckets of 8 1.03x; none is >3% faster, so the" in text
    assert_filled(text)
    # The short run's tiny model: no narrow default to compare with, no verdict.
    tiny = training_runs([1234.5] * 11)[:1]
    tiny[0]["variant"] = training.variants("float32", short=True)[0]
    text = training.training_markdown(tiny, PEAKS, "float32", 1, 2, "TABLE")
    assert "\n-  The XLA step needs static shapes" in text and "Against" not in text
    assert "On the same static shapes" not in text
    assert "- Model FLOPs: tiny 45.2 MFLOP\n" in text
    assert_filled(text)


# ---- serving --------------------------------------------------------------------------------


def serving_modes(on16: float, off16: float, differ: int = 0) -> dict:
    def figures(throughput, clients, mean_batch, texts, p50=123.4):
        return {
            "requests": 60 if clients == 1 else 256,
            "throughput": throughput,
            "p50_ms": p50,
            "p99_ms": 987.6,
            "mean_batch": mean_batch,
            "translations": texts,
        }

    same = {i: f"t{i}" for i in range(60)}
    changed = {**same, **{i: "other" for i in range(differ)}}
    return {
        "on": {1: figures(3.0, 1, 1.0, changed), 16: figures(on16, 16, 12.25, {})},
        "off": {1: figures(3.2, 1, 1.0, same, 118.6), 16: figures(off16, 16, 1.0, {})},
        "grpc": {1: figures(3.3, 1, 1.0, same, 111.2), 16: figures(on16 * 1.1, 16, 13.5, {})},
    }


def test_the_serving_section_holds_the_run_figures(monkeypatch):
    fake_run_context(monkeypatch, serving)
    modes = serving_modes(20.0, 4.0, differ=2)
    ceiling = {"alone": 4.0, "together": 25.0}
    note = serving.render("model-trained", model="runs/m30k")
    monkeypatch.setattr(harness, "LOAD_AT_START", "0.5/1.2/2.0")
    args = argparse.Namespace(rounds=2, timeout=2500)
    text = serving.section_markdown(modes, ceiling, args, note)
    assert text.startswith("## Serving (`bench/serving.py`)")
    assert REQUEST_BODY in text
    assert "measured interleaved over 2 rounds. Target: batching gives at least\n4x" in text
    assert "| batching | clients | requests | sentences/s | p50 ms | p99 ms |" in text
    on = "| on (max_batch_size 32, batch_timeout_micros 2500) |"
    assert f"{on} 1 | 60 | 3.00 | 123 | 988 | 1.0 |" in text
    assert f"{on} 16 | 256 | 20.00 | 123 | 988 | 12.2 |" in text
    assert "| off (`--no-batching`) | 16 | 256 | 4.00 | 123 | 988 | 1.0 |" in text
    assert "- **Throughput from batching at 16 clients: 5.0x** (meets 4x);" in text
    assert "at 1 client 0.94x, p50 123 ms on against 119 ms off (a\n  request alone" in text
    assert "under load a batch waits up to\n  2.5 ms for others to join it)." in text
    assert "at 4.00 sentences/s one by\n  one and 25.00 sentences/s as one batch" in text
    assert "**6.2x** is all" in text and "reaches\n  80% of it. Batching pays because" in text
    grpc = "| on, gRPC (max_batch_size 32, batch_timeout_micros 2500) |"
    assert f"{grpc} 16 | 256 | 22.00 | 123 | 988 | 13.5 |" in text
    assert text.index(f"{on} 16") < text.index(f"{grpc} 1 ") < text.index("| off (")
    assert "against REST on the same server: 1.10x REST's throughput\n  at 16 clients, 1.10x" in (
        text
    )
    assert "at 1 client (p50 111 ms against\n  123 ms)." in text
    assert "- 58/60 sentences of the 1-client runs got the same" in text
    assert "with and without batching; 60/60 the same over gRPC." in text
    assert "- Model: trained model `runs/m30k`; exported with beam 4" in text
    assert "- Command: `python -m bench.x --flag`\n- Date: 2026-01-02 03:04 UTC\n" in text
    assert "- Machine: 2 cores (nproc), FAKE CPU; load average 0.5/1.2/2.0 at the start" in text
    assert_filled(text)


@pytest.mark.parametrize(
    ("together", "server"), [(8.4, "), not in the server."), (16.0, ") and in the server.")]
)
def test_the_serving_section_says_why_a_missed_target_misses(monkeypatch, together, server):
    fake_run_context(monkeypatch, serving)
    ceiling = {"alone": 4.0, "together": together}  # 2.0x of 2.1x (over 90% of it), or of 4.0x
    note = serving.render("model-random", preset="small", parameters=11.26, vocab_size=8000)
    args = argparse.Namespace(rounds=1, timeout=10000)
    text = serving.section_markdown(serving_modes(8.0, 4.0), ceiling, args, note)
    assert "clients: 2.0x** (MISSES 4x)" in text and "10 ms for others" in text
    assert "A decoding step's cost grows almost linearly" in text
    assert (
        "so the gap to 4x is in the\n  search's per-row cost (`bench/decoding.py`" + server in text
    )
    assert "Batching pays" not in text
    assert "- Model: `small` preset with random weights (11.3M parameters), joint 8,000-piece" in (
        text
    )
    assert_filled(text)


def test_the_serving_model_notes():
    assert serving.render("model-trained", model="runs/a") == "trained model `runs/a`"
