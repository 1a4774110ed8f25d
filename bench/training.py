"""Training step speed on Multi30k: the ways to a faster step, measured side by side. MFU:
model FLOPs/s (`translator.flops`) over this machine's matmul FLOP/s in the same dtype."""

import collections
import tempfile
import time
from pathlib import Path

import keras
import tensorflow as tf

from bench import harness
from training.config import load_config
from training.engines import tf_strategy as strategy
from training.engines.tf_trainer import TranslationTrainer
from training.optimizer import make_optimizer
from translator import Transformer
from translator.flops import training_flops
from translator.pipelines import make_dataset, scan_corpus

render = harness.Template("training")
PRECISIONS = ("float32", "mixed_bfloat16")
NARROW = "model.overrides={num_encoder_layers: 4, num_decoder_layers: 4, d_model: 128, "
NARROW += "ffn_dim: 256, num_heads: 4}"
# The static shapes an XLA step compiles one program each for (buckets; 128 the longest).
STATIC = (
    "data.pipeline.static_shapes=true",
    "data.pipeline.bucket_boundaries=[16, 24, 32, 48, 64]",
)
# The narrow shape's variants, in the precision `auto` picks: (label, `--set`s). The plain
# step on the static shapes tells their padding's cost from what XLA gains or loses.
NARROW_VARIANTS = {
    "plain step, 6 static shapes": STATIC,
    "XLA step, 6 static shapes": ("train.jit_compile=true", *STATIC),
    "4 steps per execution": ("train.steps_per_execution=4",),
    "buckets of 2": ("data.pipeline.bucket_width=2",),
    "buckets of 8": ("data.pipeline.bucket_width=8",),
}
XLA_PAIR = ("plain step, 6 static shapes", "XLA step, 6 static shapes")  # (plain, XLA)
COMPILE_STEP = 5.0  # a step over this many medians compiled a new shape: warm-up, not speed
Variant = collections.namedtuple("Variant", "shape label precision overrides", defaults=[()])


def variants(auto: str, short: bool) -> list[Variant]:
    """The variants in the order they run; `auto` is the precision `auto` picks here. XLA runs
    in the other precision too: its CPU code differs from oneDNN's most in bfloat16."""
    if short:
        return [Variant("tiny", "default", "float32")]
    other = next(p for p in PRECISIONS if p != auto)
    shapes = (("small", ()), ("narrow", (NARROW,)))
    narrow = [(auto, label) for label in NARROW_VARIANTS] + [(other, label) for label in XLA_PAIR]
    runs = [Variant(shape, p, p, overrides) for shape, overrides in shapes for p in PRECISIONS]
    return runs + [
        Variant("narrow", f"{p}, {label}", p, (NARROW, *NARROW_VARIANTS[label]))
        for p, label in narrow
    ]


def matmul_flops_per_second(dtype: str, size: int = 2048, repeats: int = 8) -> float:
    """Sustained FLOP/s of a square matmul in `dtype` (the MFU denominator)."""
    a = tf.cast(tf.random.normal((size, size)), dtype)

    @tf.function
    def run(x):
        for _ in range(repeats):
            x = tf.matmul(x, a) * tf.cast(1e-3, dtype)  # scaled to stay finite
        return x

    return harness.matmul_rate(lambda: run(a).numpy(), size, repeats)


def make_trainer(variant: Variant, data: Path, vocabulary):
    """The variant's compiled trainer, its endless training dataset, its steps per execution
    and its model FLOPs per target token. Sets the global dtype policy to the variant's."""
    keras.config.set_dtype_policy(variant.precision)
    keras.utils.set_random_seed(1)
    preset = "tiny" if variant.shape == "tiny" else "small"
    lengths = ("data.pipeline.max_source_length=128", "data.pipeline.max_target_length=128")
    run_config = load_config(None, [f"model.preset={preset}", *lengths, *variant.overrides])
    pipeline, per_call = run_config.data.pipeline, run_config.train.steps_per_execution
    config = run_config.model.transformer_config(
        vocabulary.source_vocab_size, vocabulary.target_vocab_size
    )
    trainer = TranslationTrainer(Transformer(config))
    optimizer, jit = make_optimizer(run_config, config.d_model), run_config.train.jit_compile
    trainer.compile(optimizer=optimizer, jit_compile=jit, steps_per_execution=per_call)
    files = [data / name for name in harness.TRAIN]
    dataset = make_dataset(*files, vocabulary, pipeline, training=True).repeat()
    return trainer, dataset, per_call, flops_per_target_token(config, data, vocabulary, pipeline)


def flops_per_target_token(config, data: Path, vocabulary, pipeline) -> float:
    """Training FLOPs (matmuls, no padding) per target token at Multi30k's mean lengths."""
    stats = scan_corpus(*(data / name for name in harness.TRAIN), vocabulary, pipeline)
    source, target = stats.source_tokens / stats.kept, stats.target_tokens / stats.kept
    return float(training_flops(config, source, target)) / target


def train_throughput(variant: Variant, data: Path, vocabulary, warmup: int, steps: int) -> dict:
    trainer, dataset, per_call, flops_per_token = make_trainer(variant, data, vocabulary)
    marks = {}  # updates done -> (seconds the execution took, tokens so far)

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.begun = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            marks[batch + 1] = (time.perf_counter() - self.begun, float(logs["tokens"]))

    total = warmup + steps + (-(warmup + steps) % per_call)  # whole executions
    started = time.perf_counter()
    trainer.fit(dataset, epochs=1, steps_per_epoch=total, verbose=0, callbacks=[Clock()])
    ended = time.perf_counter()
    keras.config.set_dtype_policy("float32")
    timed = sorted(s for s in marks if s > warmup)
    tokens = {s: marks[s][1] - marks[max(m for m in marks if m < s)][1] for s in timed}
    median = sorted(marks[s][0] for s in timed)[len(timed) // 2]
    steady = [s for s in timed if marks[s][0] <= COMPILE_STEP * median]
    seconds = sum(marks[s][0] for s in steady)
    rate = sum(tokens[s] for s in steady) / seconds
    return {
        "variant": variant,
        "tokens_per_second": rate,
        "model_flops_per_second": rate * flops_per_token,
        "warmup_seconds": ended - started - seconds,  # everything but the steady steps
        "compile_steps": len(timed) - len(steady),
        "flops_per_target_token": flops_per_token,
    }


def throughput_table(runs: list[dict], peaks: dict[str, float]) -> str:
    first, rows = {}, []
    for run in runs:  # the row's fields: these local names
        v, rate, model = run["variant"], run["tokens_per_second"], run["model_flops_per_second"]
        peak = peaks["mixed_bfloat16" if "bfloat16" in v.precision else "float32"]
        vs_first, mfu = rate / first.setdefault(v.shape, rate), model / peak
        warmup, model_gflops, peak_gflops = run["warmup_seconds"], model / 1e9, peak / 1e9
        rows.append(render("table-row", **locals()))
    return render("table", rows="\n".join(rows))


def variant_verdict(runs: list[dict], auto: str) -> str:
    """Each narrow variant against the default step (the first narrow run in `auto`)."""
    narrow = [run for run in runs if run["variant"].shape == "narrow"]
    default, *others = [run for run in narrow if run["variant"].precision == auto] or [None]
    if default is None:
        return ""
    rate = default["tokens_per_second"]
    ratios = ", ".join(
        f"{run['variant'].label.removeprefix(auto + ', ')} {run['tokens_per_second'] / rate:.2f}x"
        for run in others
    )
    kept = [run["variant"].label for run in narrow if run["tokens_per_second"] > 1.03 * rate]
    faster = render("verdict-faster", labels=", ".join(kept)) if kept else render("verdict-none")
    return render("verdict", auto=auto, rate=rate, others=ratios, faster=faster)


def xla_against_plain(runs: list[dict]) -> str:
    """The XLA step against the plain step on the same static shapes, in each precision."""
    rates = {run["variant"].label: run["tokens_per_second"] for run in runs}
    ratios = [
        f"{xla / plain:.2f}x in {precision}"
        for precision in PRECISIONS
        for plain, xla in [[rates.get(f"{precision}, {label}") for label in XLA_PAIR]]
        if plain and xla
    ]
    compiled = sum(run.get("compile_steps", 0) for run in runs)
    return render("xla", ratios=", ".join(ratios), compiled=compiled) if ratios else ""


def training_markdown(runs, peaks, auto, warmup, steps, table) -> str:
    """The section: the template filled with this run's figures (its local names)."""
    native_bfloat16 = "has" if strategy.cpu_has_native_bfloat16() else "does not have"
    bfloat16_gflops, float32_gflops = peaks["mixed_bfloat16"] / 1e9, peaks["float32"] / 1e9
    flops = {run["variant"].shape: run["flops_per_target_token"] / 1e6 for run in runs}
    flops = ", ".join(f"{shape} {value:.1f}" for shape, value in flops.items())
    verdict, xla = variant_verdict(runs, auto), xla_against_plain(runs)
    return render("section", **harness.footer(), **locals())


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("training", __doc__)
    args = harness.parse(parser, argv, steps=(40, 2), warmup=(10, 1))
    harness.quiet()
    auto = strategy.select_precision("auto", tf.distribute.get_strategy())
    data = harness.find_data(args.data)
    peaks = {p: matmul_flops_per_second(p.removeprefix("mixed_")) for p in PRECISIONS}
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        vocabulary = harness.vocabulary(Path(scratch) / "vocab", data)
        for variant in variants(auto, args.short):
            runs.append(train_throughput(variant, data, vocabulary, args.warmup, args.steps))
            print(f"{variant.shape} {variant.label}: {runs[-1]['tokens_per_second']:,.0f} tok/s")
    table = throughput_table(runs, peaks)
    print(table, flush=True)
    figures = (runs, peaks, auto, args.warmup, args.steps, table)
    return harness.publish(args, "training", training_markdown, *figures)
