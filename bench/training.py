"""Training throughput on Multi30k: target tokens/s and MFU, float32 vs bfloat16.

The model is the OpenNMT-tf comparison shape (3+3 layers, d_model 256, 4 heads, FFN
1024, a joint 8,000-piece SentencePiece vocabulary, 4,096-token batches), trained with
the real pipeline and the real training step (`TranslationTrainer` under `fit`).

MFU = model FLOPs/s (`translator.flops`, padding excluded) / the matrix-multiply FLOP/s
of this machine in the same compute dtype, both measured in this run, side by side.

    python -m bench.training            # full run, writes bench/RESULTS.md
    python -m bench.training --short    # a quick check, prints only
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from bench.pipeline import find_data
from bench.results import command_line, machine_summary, report_target, today, update_section

PEER_TOKENS_PER_SECOND = 2700  # OpenNMT-tf 2.32 on this machine and model shape
TARGET = 2 * PEER_TOKENS_PER_SECOND


def matmul_flops_per_second(dtype: str, size: int = 2048, repeats: int = 8) -> float:
    """Sustained FLOP/s of a square matmul in `dtype` (the MFU denominator)."""
    import tensorflow as tf

    a = tf.random.normal((size, size), dtype=tf.float32)
    a = tf.cast(a, dtype)

    @tf.function
    def run(x):
        for _ in range(repeats):
            x = tf.matmul(x, a) * tf.cast(1e-3, dtype)  # scaled to stay finite
        return x

    run(a).numpy()  # trace and warm up
    best = 0.0
    for _ in range(3):
        started = time.perf_counter()
        run(a).numpy()
        best = max(best, 2.0 * size**3 * repeats / (time.perf_counter() - started))
    return best


def train_throughput(
    precision: str, data, vocabulary, warmup: int, steps: int, preset: str = "small"
) -> dict:
    """Trains the comparison model for warmup + steps; times the last `steps`."""
    import keras

    from training.config import load_config
    from training.run import make_optimizer
    from training.trainer import TranslationTrainer
    from translator import Transformer, TransformerConfig
    from translator.flops import training_flops
    from translator.pipelines import make_dataset, scan_corpus

    keras.config.set_dtype_policy(precision)
    keras.utils.set_random_seed(1)
    run_config = load_config(
        None, ["data.pipeline.max_source_length=128", "data.pipeline.max_target_length=128"]
    )
    pipeline = run_config.data.pipeline
    config = TransformerConfig.preset(preset, vocab_size=vocabulary.source_vocab_size)
    trainer = TranslationTrainer(Transformer(config))
    trainer.compile(optimizer=make_optimizer(run_config, config.d_model), jit_compile=False)
    source, target = data / "train.en.gz", data / "train.de.gz"
    dataset = make_dataset(source, target, vocabulary, pipeline, training=True).repeat()

    # Model FLOPs per target token at the corpus' mean lengths (EOS/BOS included).
    stats = scan_corpus(source, target, vocabulary, pipeline)
    mean_source = stats.source_tokens / stats.kept
    mean_target = stats.target_tokens / stats.kept
    flops_per_target_token = float(training_flops(config, mean_source, mean_target)) / mean_target

    marks = {}

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 in (warmup, warmup + steps):
                marks[batch + 1] = (time.perf_counter(), float(logs["tokens"]))

    started = time.perf_counter()
    trainer.fit(dataset, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[Clock()])
    (t0, tokens0), (t1, tokens1) = marks[warmup], marks[warmup + steps]
    tokens_per_second = (tokens1 - tokens0) / (t1 - t0)
    keras.config.set_dtype_policy("float32")
    return {
        "precision": precision,
        "tokens_per_second": tokens_per_second,
        "model_flops_per_second": tokens_per_second * flops_per_target_token,
        "warmup_seconds": t0 - started,
        "steps": steps,
        "flops_per_target_token": flops_per_target_token,
    }


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; writes its RESULTS.md section unless --short."""
    parser = argparse.ArgumentParser(prog="bench.training", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="directory with Multi30k train.{en,de}.gz")
    parser.add_argument("--vocab", help="vocabulary directory (default: train an 8,000-piece one)")
    parser.add_argument("--steps", type=int, help="timed float32 steps (default 60, short 2)")
    parser.add_argument(
        "--bf16-steps",
        type=int,
        help="timed bfloat16 steps (default 12, short 2): each is ~8x slower on a CPU "
        "without bfloat16 instructions",
    )
    parser.add_argument("--warmup", type=int, help="untimed steps first (default 10, short 1)")
    parser.add_argument(
        "--short",
        action="store_true",
        help="quick check of the code path with the tiny model; does not write RESULTS.md",
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.getLogger("translator.pipelines").setLevel(logging.ERROR)
    steps = {
        "float32": args.steps or (2 if args.short else 60),
        "mixed_bfloat16": args.bf16_steps or (2 if args.short else 12),
    }
    warmup = args.warmup or (1 if args.short else 10)
    preset = "tiny" if args.short else "small"

    from translator.pipelines import build_vocabulary, load_vocabulary

    data = find_data(args.data)
    with tempfile.TemporaryDirectory() as scratch:
        vocab_dir = args.vocab
        if vocab_dir is None:
            vocab_dir = os.path.join(scratch, "vocab")
            build_vocabulary(
                [data / "train.en.gz"], [data / "train.de.gz"], vocab_dir, vocab_size=8000
            )
        vocabulary = load_vocabulary(vocab_dir)
        peaks = {
            p: matmul_flops_per_second(d)
            for p, d in (("float32", "float32"), ("mixed_bfloat16", "bfloat16"))
        }
        runs = [train_throughput(p, data, vocabulary, warmup, steps[p], preset) for p in peaks]

    rows = []
    for run in runs:
        peak = peaks[run["precision"]]
        rows.append(
            f"| {run['precision']} | **{run['tokens_per_second']:,.0f}** | "
            f"{run['tokens_per_second'] / PEER_TOKENS_PER_SECOND:.2f}x | "
            f"{run['model_flops_per_second'] / 1e9:,.1f} | {peak / 1e9:,.0f} | "
            f"{100 * run['model_flops_per_second'] / peak:.0f}% | "
            f"{peak / run['flops_per_target_token']:,.0f} | {run['warmup_seconds']:.1f} s |"
        )
    best = max(run["tokens_per_second"] for run in runs)
    verdict = (
        "meets"
        if best >= TARGET
        else f"misses by {TARGET - best:,.0f} tok/s ({best / TARGET:.0%} of it)"
    )
    table = "\n".join(
        [
            "| precision | target tokens/s | vs OpenNMT-tf (2,700) | model GFLOP/s "
            "| matmul GFLOP/s | MFU | tokens/s at 100% MFU | warmup (trace) |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    print(f"goal {TARGET:,} target tok/s: {verdict}")
    for run in runs:
        report_target(
            f"training target tokens/s ({run['precision']})",
            run["tokens_per_second"],
            TARGET,
            "tok/s",
        )
    if args.short:
        return 0
    from training.strategy import cpu_has_native_bfloat16

    flops_note = runs[0]["flops_per_target_token"] / 1e6
    ceiling = max(peaks.values()) / runs[0]["flops_per_target_token"]
    fp32, bf16 = runs  # in the order of `peaks`
    bound = (
        f"No implementation can reach the goal on this machine: {TARGET:,} target tokens/s "
        f"take {TARGET * flops_note / 1e3:,.0f} model GFLOP/s, and the fastest matmul "
        f"measured here gives {max(peaks.values()) / 1e9:,.0f} GFLOP/s, i.e. at most "
        f"{ceiling:,.0f} tokens/s at 100% MFU."
        if ceiling < TARGET
        else f"The goal is within this machine's matmul rate (at most {ceiling:,.0f} "
        "tokens/s at 100% MFU)."
    )
    update_section(
        "training",
        f"""## Training throughput (`bench/training.py`)

Multi30k EN-DE, the OpenNMT-tf comparison shape (3+3 layers, d_model 256, 4 heads, FFN
1024, joint 8,000-piece vocabulary, 4,096-token batches), `TranslationTrainer` under
`fit`, {fp32["steps"]} (float32) and {bf16["steps"]} (bfloat16) timed steps after {warmup} warmup
steps each. Goal: >= {TARGET:,} target tokens/s (2x OpenNMT-tf 2.32's ~2,700 here, at ~57% MFU
in fp32): **{verdict}**.

{table}

- Why the goal is missed. {bound} The issue expected bfloat16 to double the matmul rate
  (~415 GFLOP/s); that needs bfloat16 instructions (AVX512-BF16 or AMX), which this CPU
  {"has" if cpu_has_native_bfloat16() else "does not have (its /proc/cpuinfo lists neither)"}.
  Measured in this run, a bfloat16 matmul runs at {peaks["mixed_bfloat16"] / 1e9:,.0f} GFLOP/s
  against {peaks["float32"] / 1e9:,.0f} in float32 (TensorFlow computes it through float32), and
  the rest of a bfloat16 step (casts, element-wise ops, the optimizer's float32 master weights)
  makes it {fp32["tokens_per_second"] / bf16["tokens_per_second"]:.1f}x slower than float32. The
  default precision `auto` therefore trains in float32 on a CPU without bfloat16 support.
- Profile of the float32 step (TF profiler, shares of step time, before the fixes below):
  feed-forward matmuls 25%, attention projections 21%, tied output projection 15%, loss 12%,
  LayerNorm 8%, attention core 7.5%, dropout 3%. Applied since: the fused label-smoothed
  cross-entropy (`translator.losses`: the loss's gather gradient was a scatter), the tied
  projection as one 2-D matmul (a batched matmul's gradient summed a
  `[batch, d_model, vocab]` product), attention as heads-first batch matmuls with an additive
  mask; and `one_device` training no longer runs under `OneDeviceStrategy` (1.55x step
  time in `translator train`, measured side by side). The step now runs at
  {100 * fp32["model_flops_per_second"] / peaks["float32"]:.0f}% MFU; the rest is element-wise
  work (LayerNorm, dropout, softmax, Adam). The peer's ~2,700 tokens/s at ~57% MFU implies
  a faster matmul (~215 GFLOP/s, the issue's figure) than the one measured here.
- Model FLOPs: {flops_note:.1f} MFLOP per target token (`translator.flops`, matmuls only,
  padding excluded, training = 3x forward). Matmul FLOP/s: a 2048^3 `tf.matmul` in the
  compute dtype, best of 3, measured in the same run. "tokens/s at 100% MFU": that matmul
  rate over the model FLOPs per token.
- Command: `{command_line()}`
- Date: {today()}
- Machine: {machine_summary()}
""",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
