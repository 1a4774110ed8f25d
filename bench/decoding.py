"""Decoding speed: target tokens/s of greedy and beam search against a naive decoder.

Without --model, random `small` weights: a random model never ranks EOS first, so sources
are random ids, 1.23 pieces a word (`RandomPieces`), each output cut at its source's length.
"""

import collections
import dataclasses
import inspect
import time
import warnings

import keras
import numpy as np
import tensorflow as tf

from bench import harness
from bench.counting import CountingModel
from translator import Transformer, TransformerConfig
from translator.artifacts import load_model_dir, resolve_model_dir
from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.inference import Translator
from translator.io import read_lines
from translator.search import Decoder, SearchConfig, search
from translator.search.common import output_length_limits
from translator.text import LENGTH_MULTIPLE, default_max_source_length

render = harness.Template("decoding")
BATCH_TOKENS = 640  # batches of 14 to 40 sentences here (the library's default: up to 256)
VOCAB_SIZE = 8000
PIECES_PER_WORD = 1.23  # English, 8k joint unigram vocabulary of the Multi30k recipe
BEAM_GOAL = 750  # target tokens/s with beam 4, this model shape, this 2-core CPU
REQUIRED_RATIO = 20  # beam 4 over the naive decoder, in target tokens/s
NAIVE, NAIVE_COMPILED = ("naive", False), ("naive, compiled step", False)
BEAM, TOP_BEAM = ("beam 4", False), ("beam 4, top-beam stop", False)
GOALS, BEAM_AND_GREEDY = (BEAM_GOAL, REQUIRED_RATIO), ("greedy", "beam 4")
WITH = {False: "without", True: "with"}  # XLA


class RandomPieces:
    """The random model's tokenizer: per line, round(1.23 n) seeded random ids for n words,
    with `SentencePieceTokenizer.tokenize`'s types, so they take the real text path."""

    def tokenize(self, lines):
        rng = np.random.default_rng(0)
        words = [len(line.decode("utf-8").split()) for line in lines.numpy()]
        counts = [max(1, round(PIECES_PER_WORD * n)) for n in words]
        ids = [rng.integers(4, VOCAB_SIZE, size=count) for count in counts]
        flat = np.concatenate([np.zeros(0, np.int64), *ids]).astype(np.int32)
        return tf.RaggedTensor.from_row_lengths(flat, np.asarray(counts, np.int64))


def make_batches(lines, tokenizer, max_source_length: int, batch_tokens: int, count: int | None):
    """`count` of the batches `translator translate` would search (None: all), spread."""
    return spread(harness.source_batches(lines, tokenizer, max_source_length, batch_tokens), count)


def spread(items: list, count: int | None) -> list:
    """`count` items evenly spaced over the list (all of them for None)."""
    if count is None or count >= len(items):
        return list(items)
    step = len(items) / count
    return [items[int(i * step + step / 2)] for i in range(count)]


def naive_greedy(model, config, compiled: bool):
    """The tutorial decoder: greedy, no cache, the whole prefix recomputed every step; with
    the search's length limits, forbidden ids and forced EOS, so the same ids as greedy."""

    def last_logits(source_ids, target_ids):  # [b, s], [b, t] -> [b, vocab]
        with warnings.catch_warnings():  # Keras warns about the 1-key softmax of step 0
            warnings.filterwarnings("ignore", "You are using a softmax over axis")
            return model((source_ids, target_ids), training=False)[:, -1, :]

    spec = [tf.TensorSpec([None, None], tf.int32)] * 2
    last_logits = tf.function(last_logits, input_signature=spec) if compiled else last_logits

    def decode(source):  # int32 [batch, length] -> per sentence its ids, EOS included
        limits = output_length_limits(tf.constant(source), config, model.config.position_limit)
        limits = np.asarray(limits[0])
        target = np.full((len(source), 1), BOS_ID, np.int32)  # [batch, 1 + step]
        ended = np.zeros(len(source), bool)
        for step in range(int(limits.max())):
            logits = last_logits(tf.constant(source), tf.constant(target)).numpy()
            logits[:, [PAD_ID, BOS_ID]] = -np.inf  # never generated, as in the search
            if step < config.min_length:
                logits[:, EOS_ID] = -np.inf
            token = np.argmax(logits, axis=-1).astype(np.int32)
            token = np.where(step + 1 >= limits, EOS_ID, token)  # EOS forced at the limit
            token = np.where(ended, PAD_ID, token)
            ended |= token == EOS_ID
            target = np.concatenate([target, token[:, None]], axis=1)
            if ended.all():
                break
        return [row[row != PAD_ID].tolist() for row in target[:, 1:]]

    return decode


def searcher(model, config, jit_compile: bool):
    """Our search, returning per sentence its best hypothesis' ids."""
    decoder = Decoder(model, config, jit_compile=jit_compile)

    def decode(source):
        result = decoder(source)
        ids, lengths = np.asarray(result.ids)[:, 0], np.asarray(result.lengths)[:, 0]
        return [row[:n].tolist() for row, n in zip(ids, lengths, strict=True)]

    return decode


@dataclasses.dataclass
class Measurement:
    """One decoder's best pass per batch it ran (`indices`), and its warm-up (trace, compile)."""

    name: str
    xla: bool
    indices: list[int]
    seconds: list[float]
    cpu_seconds: list[float]
    outputs: list[list[list[int]]]  # per batch, per sentence: ids with EOS
    first_call: float = 0.0
    warm: dict[int, float] = dataclasses.field(default_factory=dict)

    label = property(lambda self: self.name + (" (XLA)" if self.xla else ""))
    batches = property(lambda self: len(self.indices))
    tokens = property(lambda self: sum(len(ids) for batch in self.outputs for ids in batch))
    steady = property(lambda self: sum(self.seconds))
    rate = property(lambda self: self.tokens / self.steady)
    cpu_rate = property(lambda self: self.tokens / sum(self.cpu_seconds))
    cpu_per_wall = property(lambda self: sum(self.cpu_seconds) / self.steady)
    shapes = property(lambda self: len(self.warm))
    # Warm-up time over the same batches' steady time: traces and XLA compiles.
    compile_overhead = property(
        lambda self: max(sum(self.warm[p] - self.seconds[p] for p in self.warm), 0.0)
    )

    def rate_on(self, indices: list[int], cpu: bool = False) -> float:
        positions = [self.indices.index(i) for i in indices]
        times = self.cpu_seconds if cpu else self.seconds
        tokens = sum(len(ids) for p in positions for ids in self.outputs[p])
        return tokens / sum(times[p] for p in positions)


def measure(runs, batches, repeats: int) -> list[Measurement]:
    """Warm-up, then `repeats` passes of `runs` ((name, xla, decode, batch indices)) taking
    turns on each batch (load hits them alike); a batch's steady time is its best pass."""
    measurements = [Measurement(name, xla, list(ix), [], [], []) for name, xla, _, ix in runs]
    decoders = list(zip(measurements, [decode for _, _, decode, _ in runs], strict=True))
    for m, decode in decoders:
        shapes = {}  # the first batch; with XLA, one of each shape (one compile each)
        for position, index in enumerate(m.indices):
            shapes.setdefault(batches[index].shape if m.xla else 0, position)
        for position in shapes.values():
            started = time.perf_counter()
            decode(batches[m.indices[position]])
            m.warm[position] = time.perf_counter() - started
        m.first_call = m.warm[0]
        print(f"{m.label}: warm-up {sum(m.warm.values()):.2f} s", flush=True)
    for repeat in range(repeats):
        for index, batch in enumerate(batches):
            for m, decode in decoders:
                if index not in m.indices:
                    continue
                start, cpu = time.perf_counter(), time.process_time()
                outputs = decode(batch)
                seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
                if repeat == 0:
                    m.seconds.append(seconds)
                    m.cpu_seconds.append(cpu)
                    m.outputs.append(outputs)
                elif seconds < m.seconds[position := m.indices.index(index)]:
                    m.seconds[position], m.cpu_seconds[position] = seconds, cpu
    return measurements


def load_model(args):
    """(model, source tokenizer, `SearchConfig` length fields, the model's description)."""
    if args.model:
        trained = load_model_dir(resolve_model_dir(args.model))
        description = render("model-trained", directory=trained.directory, c=trained.model.config)
        return trained.model.for_inference(), trained.vocabulary.source, {}, description
    keras.utils.set_random_seed(0)
    model = Transformer(TransformerConfig.preset("small", vocab_size=VOCAB_SIZE))
    model.build()
    limits = dict(max_length_a=1.0, max_length_b=0)  # output length = source length
    return model, RandomPieces(), limits, render("model-random")


class StepCount(collections.namedtuple("StepCount", "tokens compact static")):
    """Steps (a sentence's beam rows) run per returned token: with compaction, or static (XLA)."""

    compact_rate = property(lambda self: self.compact / self.tokens)
    static_rate = property(lambda self: self.static / self.tokens)


def count_steps(model, configs: dict, batches) -> dict[str, StepCount]:
    """Each search once over the batches under a `CountingModel`: one compacted run gives
    both counts (its loop ends when the batch's last sentence is done, as a static one's)."""
    counting, counts = CountingModel(model), {}
    for name, config in configs.items():
        run = tf.function(
            lambda ids, config=config: search(counting, ids, config, compact=True),
            input_signature=[tf.TensorSpec([None, None], tf.int32)],
        )
        tokens = compact = static = 0
        for batch in batches:
            counting.reset()
            tokens += int(np.asarray(run(batch).lengths)[:, 0].sum())
            compact += int(counting.rows.numpy()) // config.beam_size
            static += int(counting.steps.numpy()) * len(batch)
        counts[name] = StepCount(tokens, compact, static)
        print(f"{name}: {compact / tokens:.3f} steps per token compacted, {static / tokens:.3f}")
    return counts


def speedup(results: dict, key, reference=NAIVE, cpu: bool = False) -> float:
    """Tokens per (CPU) second of a decoder over a reference's, on the batches both ran."""
    base, measurement = results[reference], results[key]
    common = [i for i in base.indices if i in measurement.indices]
    return measurement.rate_on(common, cpu) / base.rate_on(common, cpu) if common else float("nan")


def pairs(a: Measurement, b: Measurement) -> list[tuple[list[int], list[int]]]:
    """Per sentence that both decoders translated: (a's ids, b's ids)."""
    return [
        (x, y)
        for batch, index in zip(a.outputs, a.indices, strict=True)
        for x, y in zip(batch, b.outputs[b.indices.index(index)], strict=True)
    ]


def results_table(results: dict) -> str:
    rows = []
    for key, m in results.items():  # the row's fields: these local names
        vs_naive, vs_compiled = speedup(results, key), speedup(results, key, NAIVE_COMPILED)
        rows.append(render("results-row-xla" if m.xla else "results-row", **locals()))
    return render("results-table", rows="\n".join(rows))


def top_beam_row(results: dict) -> str:
    """The row of the top-beam stop against beam 4 (no XLA); '' if not run."""
    if TOP_BEAM not in results:
        return ""
    changed = pairs(results[TOP_BEAM], results[BEAM])
    ratio = results[TOP_BEAM].rate / results[BEAM].rate
    differ = sum(x != y for x, y in changed)
    return render("top-beam-row", ratio=ratio, differ=differ, total=len(changed)) + "\n"


def why_beam_misses(results: dict, best, steps: dict[str, StepCount]) -> str:
    """The bullet on a missed beam-4 goal, from the step counts; '' if met."""
    m, count, beam_goal = results[best], steps["beam 4"], BEAM_GOAL
    if m.rate >= BEAM_GOAL:
        return ""
    per_token = count.static_rate if m.xla else count.compact_rate
    gap = BEAM_GOAL - m.rate
    share, step_rate = gap / BEAM_GOAL, m.rate * per_token  # sentence-steps per second
    if per_token < 1.05:
        return render("why-misses-step-cost", **locals()) + "\n"
    where = render("where-static" if m.xla else "where-compaction")
    step_verdict = "meets" if step_rate >= BEAM_GOAL else "still misses"
    text = render("why-misses-wasted-steps", **locals())
    if TOP_BEAM in results:
        text += "\n" + render("why-misses-top-beam", c=steps[TOP_BEAM[0]])
    return text + "\n"


def section_markdown(args, results: dict, best, agree, steps: dict[str, StepCount], model: str):
    """The section: the template filled with this run's figures (its local names)."""
    m, beam_goal, required_ratio, default_batch_tokens = results[best], *GOALS, BATCH_TOKENS
    length_multiple, title = LENGTH_MULTIPLE, render("title-trained" if args.model else "title")
    library_batch_tokens = inspect.signature(Translator).parameters["batch_tokens"].default
    sizes = [len(batch) for batch in m.outputs]  # sentences per batch
    sentences, batches, largest = sum(sizes), len(sizes), max(sizes)
    ratio, cpu_ratio = speedup(results, best), speedup(results, best, cpu=True)
    compiled_ratio = speedup(results, best, NAIVE_COMPILED)
    compiled_cpu_ratio = speedup(results, best, NAIVE_COMPILED, cpu=True)
    rate_verdict = harness.verdict(m.rate, BEAM_GOAL)
    ratio_verdict = harness.verdict(ratio, REQUIRED_RATIO)
    greedy_over_beam = ", ".join(
        render("greedy-over-beam", ratio=results["greedy", x].rate / b.rate, xla=WITH[x])
        for (name, x), b in results.items()
        if name == "beam 4"
    )
    xla_gain = ", ".join(
        render("xla-gain", name=name, ratio=results[name, True].rate / results[name, False].rate)
        for name in ("greedy", "beam 4")
        if (name, True) in results
    ) or render("xla-not-measured")
    top_beam, table = top_beam_row(results), results_table(results)
    why = why_beam_misses(results, best, steps)
    rows = [render("steps-row", name=name, c=c) for name, c in steps.items()]
    steps_table = render("steps-table", rows="\n".join(rows))
    return render("section", **harness.footer(), **locals())


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("decoding", __doc__, model=True)
    parser.add_argument("--batch-tokens", type=int, default=BATCH_TOKENS, help="as translate's")
    args = harness.parse(parser, argv)
    # Batches (None: all, spread over the lengths), the eager naive decoder's, steady passes.
    args.batches, args.naive_batches, args.repeats = (2, 1, 1) if args.short else (None, 8, 2)
    data = harness.find_data(args.data, files=(harness.TEST_SOURCE,))
    model, tokenizer, limits, description = load_model(args)
    lines, cut = read_lines(data / harness.TEST_SOURCE), default_max_source_length(model.config)
    batches = make_batches(lines, tokenizer, cut, args.batch_tokens, args.batches)
    print(f"model: {description}\n{sum(map(len, batches))} sentences in {len(batches)} batches")
    configs = {"greedy": SearchConfig(beam_size=1, **limits)}
    configs["beam 4"] = SearchConfig(beam_size=4, **limits)
    if args.model:  # a random model's sentences all stop at their limit: nothing to compare
        configs[TOP_BEAM[0]] = SearchConfig(beam_size=4, exact_stop=False, **limits)
    every = list(range(len(batches)))
    runs = [
        (*NAIVE, naive_greedy(model, configs["greedy"], False), spread(every, args.naive_batches)),
        (*NAIVE_COMPILED, naive_greedy(model, configs["greedy"], True), every),
    ]
    xlas = (False,) if args.short else (False, True)
    runs += [(n, x, searcher(model, configs[n], x), every) for x in xlas for n in BEAM_AND_GREEDY]
    if TOP_BEAM[0] in configs:
        runs.append((*TOP_BEAM, searcher(model, configs[TOP_BEAM[0]], False), every))
    results = {(m.name, m.xla): m for m in measure(runs, batches, args.repeats)}
    greedy = results["greedy", False]
    both = [p for key in (NAIVE, NAIVE_COMPILED) for p in pairs(results[key], greedy)]
    agree = (sum(x == y for x, y in both), len(both))
    print(f"greedy search and the naive decoders agree on {agree[0]}/{agree[1]} sentences")
    steps = count_steps(model, configs, batches)
    best = max([k for k in results if k[0] == "beam 4"], key=lambda k: results[k].rate)
    rate, ratio, label = results[best].rate, speedup(results, best), results[best].label
    harness.report_target(f"decoding {label} target tokens/s", rate, BEAM_GOAL, "tok/s")
    harness.report_target(f"decoding {label} over the naive decoder", ratio, REQUIRED_RATIO, "x")
    print(results_table(results))
    section, figures = "decoding-trained" if args.model else "decoding", (best, agree, steps)
    return harness.publish(args, section, section_markdown, args, results, *figures, description)
