"""Decoding speed: target tokens/s of greedy and beam search against a naive decoder.

    python -m bench.decoding                  # full run, writes its section of RESULTS.md
    python -m bench.decoding --short          # ~1 minute smoke run, prints only
    python -m bench.decoding --model RUN_DIR  # a trained model and its tokenizer

The 1,000 English sentences of Multi30k test_2016_flickr are cut into batches as
`translator translate` cuts them, by the library's text path: `translator.text.prepare`
(pieces + EOS, sorted by length, padded to a multiple of 8) and `batch_ranges` (at most
`--batch-tokens` padded source tokens a batch; default 640, about 32 sentences a batch as
in the runs before, where the library's default makes up to 256). They are translated
side by side in one process by:

- naive: the reference decoder of the tutorial kind (the TensorFlow Transformer
  tutorial's `Translator`): greedy, no cache, every step runs the whole model (encoder
  included) on the whole prefix and keeps the last position's logits, one eager Keras
  call per token from a Python loop, up to a fixed maximum length: the batch's longest
  length limit (it stops early only once every sentence has ended). It gets the search's
  per-sentence limits, forbidden ids and forced final EOS, so it produces the same
  tokens as greedy search; the figures check that.
- naive, compiled step: the same algorithm with each step's forward pass compiled (one
  `tf.function`, traced once), a stronger baseline that isolates what the cache and the
  in-graph loop buy from what leaving eager execution buys.
- greedy and beam 4: `translator.search.Decoder` (the whole search is one
  `tf.while_loop` in one `tf.function`, traced once for every batch shape), without and
  with XLA (`jit_compile=True`: one compile per distinct batch shape).
- beam 4, top-beam stop (with `--model` only): beam 4 with `exact_stop=False`, which ends
  a sentence once its best candidate ends (OpenNMT-py's and CTranslate2's rule), without
  XLA; the figures count the translations it changes.

Then one more pass runs each search under `translator.search.counting.CountingModel` and
counts its decoder steps per returned token, with and without compaction: the figure
that tells steps that are slow from steps that return nothing.

Figures: target tokens (the returned 1-best translation's tokens, EOS included) per
second of steady state. The decoders take turns on each batch, `--repeats` passes, and
each batch counts with its best pass: the machine is shared, its load changes over
minutes, and other processes only ever slow a pass down; tokens per CPU-second of this
process are reported too. Before that, each decoder is warmed up on the first batch, and
with XLA on one batch of every distinct shape; the warm-up's extra time over the steady
time of the same batches is the trace (and XLA compile) cost, reported apart.

Model. `--model DIR` (a model directory or a training run directory): its weights and
tokenizer, the default `SearchConfig` limits (a = 1.2, b = 10); translations end where
the model puts EOS. Without it: `TransformerConfig.preset("small", vocab_size=8000)` (3+3
layers, d_model 256, FFN 1024) with random weights.
Random weights are a fair speed proxy when the output lengths are realistic: the cost of
a step is dense float32 arithmetic whose amount does not depend on the weight values,
only on the batch shape and the number of steps. But a random model never ranks EOS
first, so its translations would all run to the length limit (about 1.8x the real
length). Lengths are therefore set per sentence to the source's: sources are random
ids, round(1.23 x words) pieces + EOS (the 8,000-piece joint vocabulary of the Multi30k
recipe averages 1.23 pieces per English word; `RandomPieces`, a stand-in tokenizer, so
they take the same text path), and the output limit is a = 1, b = 0
(German references average 1.03 pieces per English source piece there: 16.1 vs 15.7 per
sentence, EOS included). Every sentence then stops at exactly its limit, which the
search forces with EOS; a trained model's beams also stop early, but beam search may
run a few steps past the best hypothesis before its early stop can prove it optimal, so
the proxy slightly favours beam search; `--model` measures that too.

Data: --data, else $TRANSLATOR_DATA_MIRROR (or its multi30k/ subdirectory), else
<repo>/../shared/data/multi30k.

The section's words are in bench/templates/decoding.md; this module measures the figures
and fills them in.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/decoding.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pipeline import find_data
from bench.results import (
    RESULTS_PATH,
    TEMPLATES,
    bind_template,
    command_line,
    machine_summary,
    report_target,
    today,
    update_section,
)
from translator.io import read_lines

TEST_FILE = "test_2016_flickr.en.gz"
# Padded source tokens per batch: on this test set, batches of 14 to 40 sentences (31
# batches), about the 32 sentences a batch of the runs before the bench cut batches by
# tokens; the library's default (`library_batch_tokens`) makes batches of up to 256 here.
BATCH_TOKENS = 640
# The words of the section, filled in by `render`.
TEMPLATE = TEMPLATES / "decoding.md"
template_parts, render = bind_template(TEMPLATE)
VOCAB_SIZE = 8000
PIECES_PER_WORD = 1.23  # English, 8k joint unigram vocabulary of the Multi30k recipe
BEAM_GOAL = 750  # target tokens/s with beam 4, this model shape, this 2-core CPU
REQUIRED_RATIO = 20  # beam 4 over the naive decoder, in target tokens/s


def make_parser() -> argparse.ArgumentParser:
    """The command line's options (defaults that depend on --short: `parse_args`)."""
    parser = argparse.ArgumentParser(prog="bench.decoding", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help=f"directory with Multi30k {TEST_FILE}")
    parser.add_argument(
        "--model",
        help="trained model (model directory or training run directory): real weights, "
        "tokenizer and length limits instead of a random 'small' model",
    )
    parser.add_argument(
        "--short",
        action="store_true",
        help="quick run: 2 of the batches (the eager naive decoder: 1), one steady pass, no XLA; "
        "prints only unless --write",
    )
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=BATCH_TOKENS,
        help=f"padded source tokens per batch, as `translator translate --batch-tokens` "
        f"(default: {BATCH_TOKENS}, about 32 sentences a batch)",
    )
    parser.add_argument(
        "--batches",
        type=int,
        help="batches to decode, spread over all lengths (default: all)",
    )
    parser.add_argument(
        "--naive-batches",
        type=int,
        help="batches for the (slow) eager naive decoder, a subset spread over the lengths "
        "(default: 8, --short: 1)",
    )
    parser.add_argument(
        "--repeats", type=int, help="steady passes, the best counts (default: 2, --short: 1)"
    )
    parser.add_argument(
        "--xla",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time the XLA-compiled searches (default: yes, no with --short)",
    )
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="update the results file (default: yes for full runs, no with --short)",
    )
    parser.add_argument(
        "--results", default=str(RESULTS_PATH), help="results file (default: bench/RESULTS.md)"
    )
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, with the defaults of a full or a --short run filled in."""
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.short:
        args.batches = args.batches or 2
    args.naive_batches = args.naive_batches or (1 if args.short else 8)
    args.repeats = args.repeats or (1 if args.short else 2)
    args.xla = not args.short if args.xla is None else args.xla
    args.write = not args.short if args.write is None else args.write
    for name in ("batch_tokens", "batches", "naive_batches", "repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


# ---- Inputs -------------------------------------------------------------------------------


class RandomPieces:
    """The random model's tokenizer: per line, random ids as many as real pieces would be.

    A line of n words gets round(1.23 n) ids (at least one) drawn from the non-special
    ids with a fixed seed, so every run translates the same sources. It has the
    `tokenize` of `SentencePieceTokenizer` (eager only), so these sources go through the
    same `translator.text.prepare` as a trained model's.
    """

    def tokenize(self, lines):
        """tf.string `[batch]` -> int32 RaggedTensor `[batch, (pieces)]`."""
        import numpy as np
        import tensorflow as tf

        rng = np.random.default_rng(0)
        counts = [
            max(1, round(PIECES_PER_WORD * len(line.decode("utf-8").split())))
            for line in lines.numpy()
        ]
        ids = [rng.integers(4, VOCAB_SIZE, size=count) for count in counts]
        flat = np.concatenate([np.zeros(0, np.int64), *ids]).astype(np.int32)
        return tf.RaggedTensor.from_row_lengths(flat, np.asarray(counts, np.int64))


def make_batches(
    lines: list[str], tokenizer, max_source_length: int, batch_tokens: int, count: int | None
) -> list:
    """The batches `translator translate` would search; `count` of them, spread.

    Args:
        lines: The source sentences.
        tokenizer: The source tokenizer (`SentencePieceTokenizer` or `RandomPieces`).
        max_source_length: Most source tokens, EOS included.
        batch_tokens: Most padded source tokens per batch.
        count: Batches to keep, spread over the lengths (None: all).

    Returns:
        int32 numpy `[batch, padded width]` source ids, shortest sentences first.
    """
    import tensorflow as tf

    from translator.text import batch_ranges, prepare

    prepared = prepare(tf.constant(lines, tf.string), tokenizer, max_source_length)
    source_ids = prepared.source_ids.numpy()  # [searched, width], sorted by length
    batches = [
        source_ids[start:end, :width]
        for start, end, width in batch_ranges(prepared.lengths.numpy(), batch_tokens)
    ]
    return spread(batches, count)


def spread(items: list, count: int | None) -> list:
    """`count` items evenly spaced over the list (all of them for None)."""
    if count is None or count >= len(items):
        return list(items)
    step = len(items) / count
    return [items[int(i * step + step / 2)] for i in range(count)]


# ---- Decoders -------------------------------------------------------------------------------


class NaiveGreedy:
    """The tutorial decoder: greedy, no cache, the whole prefix recomputed every step.

    Args:
        model: The Transformer.
        config: Its length limits (`output_length_limits`), as the search uses them.
        compiled: Run each step's forward pass as one `tf.function` (traced once) instead
            of an eager Keras call (the tutorial).
    """

    def __init__(self, model, config, compiled: bool):
        import tensorflow as tf

        from translator.search.decoder import model_position_limit

        self.config = config
        self.position_limit = model_position_limit(model.config)

        def last_logits(source_ids, target_ids):  # [b, s], [b, t] -> [b, vocab]
            with warnings.catch_warnings():  # Keras warns about the 1-key softmax of step 0
                warnings.filterwarnings("ignore", "You are using a softmax over axis")
                return model((source_ids, target_ids), training=False)[:, -1, :]

        spec = tf.TensorSpec([None, None], tf.int32)
        self.last_logits = (
            tf.function(last_logits, input_signature=[spec, spec]) if compiled else last_logits
        )

    def __call__(self, source):
        """Translates `source` int32 `[batch, length]`; returns per sentence its ids (EOS incl.)."""
        import numpy as np
        import tensorflow as tf

        from translator.constants import BOS_ID, EOS_ID, PAD_ID
        from translator.search.common import output_length_limits

        limits, _ = output_length_limits(tf.constant(source), self.config, self.position_limit)
        limits = np.asarray(limits)  # [batch]
        target = np.full((len(source), 1), BOS_ID, np.int32)  # [batch, 1 + step]
        ended = np.zeros(len(source), bool)
        source = tf.constant(source)
        for step in range(int(limits.max())):
            logits = self.last_logits(source, tf.constant(target)).numpy()  # [batch, vocab]
            logits[:, [PAD_ID, BOS_ID]] = -np.inf  # never generated, as in the search
            if step < self.config.min_length:
                logits[:, EOS_ID] = -np.inf  # no EOS before min_length, as in the search
            token = np.argmax(logits, axis=-1).astype(np.int32)
            token = np.where(step + 1 >= limits, EOS_ID, token)  # EOS forced at the limit
            token = np.where(ended, PAD_ID, token)
            ended |= token == EOS_ID
            target = np.concatenate([target, token[:, None]], axis=1)
            if ended.all():
                break
        return [row[row != PAD_ID].tolist() for row in target[:, 1:]]


class Search:
    """`translator.search.Decoder` returning per sentence the 1-best ids (EOS incl.)."""

    def __init__(self, model, config, jit_compile: bool):
        from translator.search import Decoder

        self.decoder = Decoder(model, config, jit_compile=jit_compile)

    def __call__(self, source):
        import numpy as np

        result = self.decoder(source)
        ids, lengths = np.asarray(result.ids)[:, 0], np.asarray(result.lengths)[:, 0]
        return [row[:n].tolist() for row, n in zip(ids, lengths, strict=True)]


@dataclasses.dataclass
class Measurement:
    """One decoder's timings over its batches (lists: per batch, in its batch order)."""

    name: str
    xla: bool
    # Indices (into the run's batches) of the batches this decoder translates.
    indices: list[int]
    # Steady state: the best of the passes per batch, wall and process CPU seconds.
    seconds: list[float]
    cpu_seconds: list[float]
    # The translations: per batch, per sentence, ids with EOS.
    outputs: list[list[list[int]]]
    # The very first call (trace, and with XLA the compile of its shape), seconds.
    first_call: float = 0.0
    # Warm-up seconds per warmed-up batch position (first batch; with XLA, one per shape).
    warm: dict[int, float] = dataclasses.field(default_factory=dict)

    @property
    def batches(self) -> int:
        return len(self.indices)

    @property
    def tokens(self) -> int:
        return sum(len(ids) for batch in self.outputs for ids in batch)

    @property
    def steady(self) -> float:
        return sum(self.seconds)

    @property
    def rate(self) -> float:
        """Target tokens per second of steady state."""
        return self.tokens / self.steady

    @property
    def cpu_per_wall(self) -> float:
        """Process CPU seconds per wall second (at most the core count)."""
        return sum(self.cpu_seconds) / self.steady

    @property
    def cpu_rate(self) -> float:
        """Target tokens per CPU second of this process (less sensitive to other load)."""
        return self.tokens / sum(self.cpu_seconds)

    @property
    def compile_overhead(self) -> float:
        """Warm-up time over the same batches' steady time: trace (and XLA compiles)."""
        return max(sum(self.warm[p] - self.seconds[p] for p in self.warm), 0.0)

    @property
    def shapes(self) -> int:
        return len(self.warm)

    def rate_on(self, indices: list[int], cpu: bool = False) -> float:
        """Tokens per (CPU) second over the batches `indices` (run indices) only."""
        positions = [self.indices.index(i) for i in indices]
        times = self.cpu_seconds if cpu else self.seconds
        tokens = sum(len(ids) for p in positions for ids in self.outputs[p])
        return tokens / sum(times[p] for p in positions)


def warm_up(measurement: Measurement, decode, batches) -> None:
    """Calls `decode` on its first batch, and with XLA on one batch of every other shape."""
    positions: dict[tuple[int, ...], int] = {}
    for position, index in enumerate(measurement.indices):
        positions.setdefault(batches[index].shape, position)
    for position in positions.values() if measurement.xla else [0]:
        start = time.perf_counter()
        decode(batches[measurement.indices[position]])
        measurement.warm[position] = time.perf_counter() - start
    measurement.first_call = measurement.warm[0]


def measure(runs, batches, repeats: int) -> list[Measurement]:
    """Warm-up, then `repeats` passes over the batches, every decoder on each in turn.

    Interleaving by batch keeps the decoders side by side: on a shared machine the load
    changes over minutes, and each batch's decoders run within seconds of each other.
    The steady time of a batch is its best pass (other load only ever slows a pass).

    Args:
        runs: `(name, xla, decode, indices)` per decoder; `decode(batch)` returns the
            translations, `indices` are the batches it translates.
        batches: The int32 `[batch, length]` source batches.
        repeats: Steady passes.

    Returns:
        One `Measurement` per run, in order.
    """
    measurements = []
    for name, xla, decode, indices in runs:
        measurement = Measurement(name, xla, list(indices), [], [], [])
        warm_up(measurement, decode, batches)
        measurements.append(measurement)
        print(
            f"{label_of(measurement)}: warm-up {sum(measurement.warm.values()):.2f} s", flush=True
        )
    for repeat in range(repeats):
        for index, batch in enumerate(batches):
            for measurement, (_, _, decode, _) in zip(measurements, runs, strict=True):
                if index not in measurement.indices:
                    continue
                position = measurement.indices.index(index)
                start, cpu = time.perf_counter(), time.process_time()
                outputs = decode(batch)
                seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
                if repeat == 0:
                    measurement.seconds.append(seconds)
                    measurement.cpu_seconds.append(cpu)
                    measurement.outputs.append(outputs)
                elif seconds < measurement.seconds[position]:
                    measurement.seconds[position] = seconds
                    measurement.cpu_seconds[position] = cpu
        print(f"pass {repeat + 1} of {repeats} done", flush=True)
    for m in measurements:
        print(
            f"{label_of(m)}: {m.tokens:,} target tokens in {m.steady:.2f} s = {m.rate:,.0f} "
            f"tok/s ({m.cpu_rate:,.0f} per CPU-s); first call {m.first_call:.2f} s, "
            f"trace/compile overhead {m.compile_overhead:.2f} s",
            flush=True,
        )
    return measurements


def label_of(measurement: Measurement) -> str:
    return measurement.name + (" (XLA)" if measurement.xla else "")


# ---- The run --------------------------------------------------------------------------------


def load_model(args):
    """(model, source tokenizer, SearchConfig fields, description).

    The tokenizer is the trained model's `SentencePieceTokenizer`, or for the random model
    `RandomPieces`.
    """
    if args.model:
        from translator.artifacts import load_model_dir, resolve_model_dir

        trained = load_model_dir(resolve_model_dir(args.model))
        config = trained.model.config
        description = (
            f"trained model `{trained.directory}` ({config.num_encoder_layers}+"
            f"{config.num_decoder_layers} layers, d_model {config.d_model}, FFN "
            f"{config.ffn_dim}, {config.target_vocab_size:,} target ids), real tokenizer"
        )
        return trained.model.for_inference(), trained.vocabulary.source, {}, description

    import keras

    from translator import Transformer, TransformerConfig

    keras.utils.set_random_seed(0)
    model = Transformer(TransformerConfig.preset("small", vocab_size=VOCAB_SIZE))
    model.build()
    description = (
        'random weights, `TransformerConfig.preset("small", vocab_size=8000)` (3+3 layers, '
        "d_model 256, FFN 1024), output length = source length (see the docstring)"
    )
    return model, RandomPieces(), dict(max_length_a=1.0, max_length_b=0), description


NAIVE = ("naive", False)
NAIVE_COMPILED = ("naive, compiled step", False)
BEAM = ("beam 4", False)
TOP_BEAM = ("beam 4, top-beam stop", False)


def run_decoders(args, model, configs: dict, batches) -> dict:
    """Every decoder on its batches: {(name, xla): Measurement}.

    `configs`: the `SearchConfig` of "greedy", "beam 4" and, optionally, TOP_BEAM's name.
    """
    greedy_config, beam_config = configs["greedy"], configs["beam 4"]
    every = list(range(len(batches)))
    runs = [
        (*NAIVE, NaiveGreedy(model, greedy_config, False), spread(every, args.naive_batches)),
        (*NAIVE_COMPILED, NaiveGreedy(model, greedy_config, True), every),
    ]
    for xla in (False, True) if args.xla else (False,):
        runs.append(("greedy", xla, Search(model, greedy_config, xla), every))
        runs.append(("beam 4", xla, Search(model, beam_config, xla), every))
    if TOP_BEAM[0] in configs:
        runs.append((*TOP_BEAM, Search(model, configs[TOP_BEAM[0]], False), every))
    measurements = measure(runs, batches, args.repeats)
    return {(m.name, m.xla): m for m in measurements}


@dataclasses.dataclass(frozen=True)
class StepCount:
    """The decoder steps a search ran over the batches, counted in its graph.

    A step here is one sentence's decoder step (its `beam_size` rows), so a search that
    returns a token for every step it runs has one step per returned token.
    """

    # Tokens of the returned 1-best translations, EOS included.
    tokens: int
    # Steps with compaction: a sentence counts for every step it was in the loop.
    compact: int
    # Steps without compaction (XLA): every sentence counts for every step of its batch.
    static: int


def count_steps(model, configs: dict[str, object], batches) -> dict[str, StepCount]:
    """Runs each search once over the batches under a `CountingModel`: {name: StepCount}.

    One compacted run gives both counts: its loop runs as many iterations as the static
    one (both end when the batch's last sentence is done).
    """
    import numpy as np
    import tensorflow as tf

    from bench.counting import CountingModel
    from translator.search import search

    counting = CountingModel(model)
    counts = {}
    for name, config in configs.items():
        run = tf.function(
            lambda ids, config=config: search(counting, ids, config, compact=True),
            input_signature=[tf.TensorSpec([None, None], tf.int32)],
        )
        tokens = compact = static = 0
        for batch in batches:
            counting.reset()
            result = run(batch)
            tokens += int(np.asarray(result.lengths)[:, 0].sum())
            compact += int(counting.rows.numpy()) // config.beam_size
            static += int(counting.steps.numpy()) * len(batch)
        counts[name] = StepCount(tokens, compact, static)
        print(
            f"{name}: {compact / tokens:.3f} steps per returned token with compaction, "
            f"{static / tokens:.3f} without",
            flush=True,
        )
    return counts


def speedup(results: dict, key, reference=NAIVE, cpu: bool = False) -> float:
    """Tokens per (CPU) second of a decoder over a reference's, on the batches both ran."""
    base, measurement = results[reference], results[key]
    common = [i for i in base.indices if i in measurement.indices]
    if not common:
        return float("nan")
    return measurement.rate_on(common, cpu) / base.rate_on(common, cpu)


def agreement(results: dict) -> tuple[int, int]:
    """(sentences where greedy search and the naive decoders give the same ids, compared)."""
    greedy = results[("greedy", False)]
    pairs = [
        (want, got)
        for key in (NAIVE, NAIVE_COMPILED)
        for batch, index in zip(results[key].outputs, results[key].indices, strict=True)
        for want, got in zip(batch, greedy.outputs[greedy.indices.index(index)], strict=True)
    ]
    return sum(want == got for want, got in pairs), len(pairs)


def results_table(results: dict) -> str:
    """The table of every decoder's figures, one row each."""
    rows = []
    for key, m in results.items():
        rows.append(
            render(
                "results-row-xla" if m.xla else "results-row",
                name=m.name,
                batches=m.batches,
                tokens=m.tokens,
                steady=m.steady,
                rate=m.rate,
                vs_naive=speedup(results, key),
                vs_compiled=speedup(results, key, NAIVE_COMPILED),
                cpu_rate=m.cpu_rate,
                cpu_per_wall=m.cpu_per_wall,
                first_call=m.first_call,
                overhead=m.compile_overhead,
                shapes=m.shapes,
            )
        )
    return render("results-table", rows="\n".join(rows))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from translator.search import SearchConfig
    from translator.text import default_max_source_length

    load = "/".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    data = find_data(args.data, files=(TEST_FILE,))
    print(f"data: {data / TEST_FILE}")
    print(f"machine: {machine_summary()}; load average {load}")

    model, tokenizer, limits, model_description = load_model(args)
    max_source_length = default_max_source_length(model.config)
    batches = make_batches(
        read_lines(data / TEST_FILE), tokenizer, max_source_length, args.batch_tokens, args.batches
    )
    print(f"model: {model_description}")
    print(f"{sum(len(b) for b in batches)} sentences in {len(batches)} batches")
    configs = {
        "greedy": SearchConfig(beam_size=1, **limits),
        "beam 4": SearchConfig(beam_size=4, **limits),
    }
    if args.model:  # a random model's sentences all stop at their limit: nothing to compare
        configs[TOP_BEAM[0]] = SearchConfig(beam_size=4, exact_stop=False, **limits)
    results = run_decoders(args, model, configs, batches)

    agree, compared = agreement(results)
    print(f"greedy search and the naive decoders agree on {agree}/{compared} sentences")
    steps = count_steps(model, configs, batches)
    beams = {xla: m for (name, xla), m in results.items() if name == "beam 4"}
    best = ("beam 4", max(beams, key=lambda xla: beams[xla].rate))
    label = "beam 4" + (" (XLA)" if best[1] else "")
    report_target(f"decoding {label} target tokens/s", beams[best[1]].rate, BEAM_GOAL, "tok/s")
    ratio = speedup(results, best)
    report_target(f"decoding {label} over the naive decoder", ratio, REQUIRED_RATIO, "x")
    table = results_table(results)
    print(table)
    if args.write:
        markdown = section_markdown(
            args, results, best, (agree, compared), steps, model_description, load
        )
        section = "decoding-trained" if args.model else "decoding"
        path = update_section(section, markdown, args.results)
        print(f"wrote the {section} section of {path}")
    return 0


def steps_table(steps: dict[str, StepCount]) -> str:
    """The table of each search's steps per returned token."""
    rows = [
        render(
            "steps-row",
            name=name,
            tokens=count.tokens,
            compact=count.compact / count.tokens,
            static=count.static / count.tokens,
        )
        for name, count in steps.items()
    ]
    return render("steps-table", rows="\n".join(rows))


def changed_translations(results: dict, key, reference=BEAM) -> tuple[int, int]:
    """(sentences where two decoders' 1-best ids differ, sentences both translated)."""
    a, b = results[key], results[reference]
    pairs = [
        (x, y)
        for batch, index in zip(a.outputs, a.indices, strict=True)
        for x, y in zip(batch, b.outputs[b.indices.index(index)], strict=True)
    ]
    return sum(x != y for x, y in pairs), len(pairs)


def top_beam_row(results: dict) -> str:
    """The figures row of the top-beam stop against beam 4 (no XLA); '' if not run."""
    if TOP_BEAM not in results:
        return ""
    differ, total = changed_translations(results, TOP_BEAM)
    ratio = results[TOP_BEAM].rate / results[BEAM].rate
    return render("top-beam-row", ratio=ratio, differ=differ, total=total) + "\n"


def why_beam_misses(results: dict, best, steps: dict[str, StepCount]) -> str:
    """The missed-target bullet of the best beam-4 decoder, from its step count; '' if met."""
    measurement, count = results[best], steps["beam 4"]
    if measurement.rate >= BEAM_GOAL:
        return ""
    xla = best[1]
    per_token = (count.static if xla else count.compact) / count.tokens
    gap = BEAM_GOAL - measurement.rate
    figures = dict(gap=gap, share=gap / BEAM_GOAL, per_token=per_token)
    if per_token < 1.05:
        return render("why-misses-step-cost", **figures) + "\n"
    step_rate = measurement.rate * per_token  # sentence-steps per second
    text = render(
        "why-misses-wasted-steps",
        **figures,
        label=label_of(measurement),
        step_rate=step_rate,
        where=render("where-static" if xla else "where-compaction"),
        step_verdict="meets" if step_rate >= BEAM_GOAL else "still misses",
        beam_goal=BEAM_GOAL,
    )
    if TOP_BEAM in results:
        top_steps = steps[TOP_BEAM[0]]
        text += "\n" + render(
            "why-misses-top-beam",
            compact=top_steps.compact / top_steps.tokens,
            static=top_steps.static / top_steps.tokens,
        )
    return text + "\n"


def library_batch_tokens() -> int:
    """The token budget `Translator` (`translator translate`) batches by default."""
    import inspect

    from translator.inference import Translator

    return inspect.signature(Translator).parameters["batch_tokens"].default


def ratios(results: dict) -> dict[str, str]:
    """The section's greedy-over-beam and XLA-over-no-XLA figures, as written."""
    greedy_over_beam = [
        render(
            "greedy-over-beam-xla" if xla else "greedy-over-beam",
            ratio=results[("greedy", xla)].rate / results[("beam 4", xla)].rate,
        )
        for (name, xla) in results
        if name == "beam 4"
    ]
    xla_gain = [
        render(
            "xla-gain", name=name, ratio=results[(name, True)].rate / results[(name, False)].rate
        )
        for name in ("greedy", "beam 4")
        if (name, True) in results
    ]
    return dict(
        greedy_over_beam=", ".join(greedy_over_beam),
        xla_gain=", ".join(xla_gain) or render("xla-not-measured"),
    )


def section_markdown(
    args,
    results: dict,
    best,
    agreement: tuple[int, int],
    steps: dict[str, StepCount],
    model: str,
    load: str,
) -> str:
    """The RESULTS.md section: the template filled with this run's figures."""
    from translator.text import LENGTH_MULTIPLE

    measurement = results[best]
    rate, ratio = measurement.rate, speedup(results, best)
    sizes = [len(batch) for batch in measurement.outputs]  # sentences per batch
    return render(
        "section",
        title=render("title-trained" if args.model else "title"),
        sentences=sum(sizes),
        batches=len(sizes),
        batch_tokens=args.batch_tokens,
        largest=max(sizes),
        length_multiple=LENGTH_MULTIPLE,
        model=model,
        beam_goal=BEAM_GOAL,
        required_ratio=REQUIRED_RATIO,
        label=label_of(measurement),
        rate=rate,
        rate_verdict="meets" if rate >= BEAM_GOAL else "MISSES",
        cpu_rate=measurement.cpu_rate,
        ratio=ratio,
        ratio_verdict="meets" if ratio >= REQUIRED_RATIO else "MISSES",
        cpu_ratio=speedup(results, best, cpu=True),
        compiled_ratio=speedup(results, best, NAIVE_COMPILED),
        compiled_cpu_ratio=speedup(results, best, NAIVE_COMPILED, cpu=True),
        **ratios(results),
        agree=agreement[0],
        compared=agreement[1],
        top_beam_row=top_beam_row(results),
        results_table=results_table(results),
        why_beam_misses=why_beam_misses(results, best, steps),
        default_batch_tokens=BATCH_TOKENS,
        library_batch_tokens=library_batch_tokens(),
        naive_batches=args.naive_batches,
        repeats=args.repeats,
        steps_table=steps_table(steps),
        command=command_line(),
        date=today(),
        machine=machine_summary(),
        load=load,
    )


if __name__ == "__main__":
    sys.exit(main())
