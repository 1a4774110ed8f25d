"""Our search against CTranslate2 on the same trained model: speed and BLEU.

    python -m bench.engines --model runs/bench-recipe/run   # writes its RESULTS.md section
    python -m bench.engines --short           # tiny random model, a few sentences

The model is exported with `translator export --format ctranslate2` (float32 and int8)
and every engine translates the same sentences (Multi30k test_2016_flickr, English)
through the same `translator.inference.Translator`: the same tokenization, length-sorted
batches of `--batch-tokens` and detokenization, so the figures differ only by the search.
Each engine runs in a process of its own, one after another (in one process they slowed
each other: see `measure_in_child`), on every core of the machine (2 here).

Rows: our beam 4 with the exact stop (the default) and with the top-beam stop and the
length penalty length ** 0.6 (the rules nearest CTranslate2's), each without and with XLA,
and in float32 (ours otherwise runs the model in the precision it was trained in);
CTranslate2 float32 and int8, beam 4 and greedy; our greedy search. Each engine in turn
is warmed up (XLA compiles) on the whole set, then times `--repeats` passes and counts
its best (other load only ever slows a pass). Where ours misses the ratio, its decoder
steps are counted and the network alone is timed for as many steps: where the time goes.
BLEU is sacreBLEU's default against the references.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/engines.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pipeline import find_data
from bench.results import (
    TEMPLATES,
    bind_template,
    command_line,
    machine_summary,
    report_target,
    today,
    update_section,
)
from translator.io import read_lines

TEMPLATE = TEMPLATES / "engines.md"
template_parts, render = bind_template(TEMPLATE)
SOURCE, REFERENCE = "test_2016_flickr.en.gz", "test_2016_flickr.de.gz"
# Ours over CTranslate2 float32, beam 4, target tokens/s (issue 16).
RATIO_GOAL = 0.7
# int8 BLEU may lose at most this much against float32.
INT8_BLEU_LOSS = 0.5


@dataclasses.dataclass
class Row:
    """One engine's search and its figures."""

    name: str
    # "tensorflow" or the export's quantization.
    engine: str
    # `SearchConfig` fields.
    search: dict
    xla: bool = False
    # Ours: what the search computes in, as `translate --precision` (model or float32).
    precision: str = "model"
    # Best pass, seconds; target tokens of a pass; BLEU of the translations.
    seconds: float = float("inf")
    tokens: int = 0
    bleu: float = 0.0
    texts: list[str] = dataclasses.field(default_factory=list)
    # The row whose translations this one is compared with, and the share that are equal.
    compared_with: str = ""
    same: float | None = None

    @property
    def rate(self) -> float:
        """Target tokens per second of the best pass."""
        return self.tokens / self.seconds


BEAM = dict(beam_size=4)
CT2_RULES = dict(beam_size=4, exact_stop=False, length_penalty_form="power")
GREEDY = dict(beam_size=1)


def rows(short: bool) -> list[Row]:
    """The engines and searches measured."""
    ours = [
        Row("ours, beam 4 (exact stop)", "tensorflow", BEAM),
        Row("ours, beam 4 (top-beam stop, length ** 0.6)", "tensorflow", CT2_RULES),
        Row("ours, greedy", "tensorflow", GREEDY),
    ]
    if not short:
        ours += [
            Row("ours, beam 4 (exact stop), XLA", "tensorflow", BEAM, xla=True),
            Row("ours, beam 4 (top-beam stop, length ** 0.6), XLA", "tensorflow", CT2_RULES, True),
            Row(
                "ours, beam 4 (top-beam stop, length ** 0.6), float32",
                "tensorflow",
                CT2_RULES,
                precision="float32",
            ),
        ]
    nearest = {"beam 4": ours[1].name, "greedy": ours[2].name}  # our search, nearest rules
    theirs = [
        Row(f"CTranslate2 {q}, {label}", q, search, compared_with=nearest[label])
        for q in ("float32", "int8")
        for label, search in (("beam 4", CT2_RULES), ("greedy", GREEDY))
    ]
    return ours + theirs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", help="trained model or run directory (default with --short: a tiny random model)"
    )
    parser.add_argument("--short", action="store_true", help="tiny random model, 48 sentences")
    parser.add_argument("--data", help="Multi30k directory (default: the bench's data search)")
    parser.add_argument("--sentences", type=int, help="first N test sentences (default: all)")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="default: %(default)s")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes (default: 2)")
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="update the results file (default: yes for full runs, no with --short)",
    )
    parser.add_argument("--results", default=None, help="results file (default: bench's)")
    # Internal: measure one row in this process (`measure_in_child`).
    parser.add_argument("--measure-row", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--exports", help=argparse.SUPPRESS)
    parser.add_argument("--row-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.model and not args.short:
        parser.error("--model is needed (or --short for a tiny random model)")
    if args.short:
        args.sentences, args.repeats = args.sentences or 48, 1
    args.write = not args.short if args.write is None else args.write
    return args


def tiny_random_model(root: Path, data: Path):
    """A tiny random model with a real vocabulary of Multi30k, saved as a model directory."""
    import keras

    from translator import Transformer, TransformerConfig
    from translator.artifacts import save_model_dir
    from translator.pipelines.vocab import build_vocabulary

    vocab = root / "vocab"
    build_vocabulary([data / "train.en.gz"], [data / "train.de.gz"], vocab, vocab_size=1000)
    keras.utils.set_random_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=1000))
    model.build()
    return save_model_dir(root / "model", model, vocab, {"note": "random weights"})


def translators(row: Row, trained, exports: dict, batch_tokens: int):
    """The `Translator` of a row (ours, or through the CTranslate2 export)."""
    from translator.ctranslate2 import CTranslate2Decoder, engine_config, load_ctranslate2
    from translator.inference import Translator
    from translator.search import SearchConfig

    config = SearchConfig(**row.search)
    if row.engine == "tensorflow":
        model = trained.model.for_inference(row.precision)  # as `translate --precision`
        return Translator(model, trained.vocabulary, config, batch_tokens, jit_compile=row.xla)
    loaded = load_ctranslate2(exports[row.engine])
    return Translator(
        None,
        loaded.vocabulary,
        engine_config(config),
        batch_tokens,
        max_source_length=1024,
        decoder=CTranslate2Decoder(loaded, config),
    )


def measure(row: Row, translator, sources: list[str], repeats: int) -> None:
    """A warm-up pass over the whole set, then `repeats` timed passes; the best is kept."""
    translator.translate(sources)  # warm-up: traces, XLA compiles, CTranslate2 caches
    for _ in range(repeats):
        started = time.perf_counter()
        texts = translator.translate(sources)
        seconds = time.perf_counter() - started
        if seconds < row.seconds:
            row.seconds, row.tokens, row.texts = seconds, translator.stats.target_tokens, texts


def measure_in_child(index: int, args, model_dir, exports_dir: Path, data: Path) -> dict:
    """Measures row `index` in a process of its own: {seconds, tokens, texts}.

    One engine per process, one after another: in one process the engines slowed each
    other (CTranslate2 beam 4 ran at ~9,000 tok/s in a fresh process, ~5,000 once another
    CTranslate2 engine, even unloaded, or TensorFlow's search had run there).
    """
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [
            sys.executable, "-m", "bench.engines", "--measure-row", str(index),
            "--model", str(model_dir), "--exports", str(exports_dir), "--data", str(data),
            "--batch-tokens", str(args.batch_tokens), "--repeats", str(args.repeats),
            "--row-out", out.name,
        ]  # fmt: skip
        if args.sentences:
            command += ["--sentences", str(args.sentences)]
        if args.short:
            command.append("--short")
        subprocess.run(command, check=True, cwd=Path(__file__).resolve().parents[1])
        return json.loads(Path(out.name).read_text())


def child_main(args) -> int:
    """`--measure-row`: one row's figures, as JSON in `--row-out`."""
    from translator.artifacts import load_model_dir

    data = find_data(args.data, files=(SOURCE,))
    sources = read_lines(data / SOURCE, args.sentences or 0)
    row = rows(args.short)[args.measure_row]
    exports = {q: Path(args.exports) / q for q in ("float32", "int8")}
    trained = load_model_dir(args.model)
    measure(row, translators(row, trained, exports, args.batch_tokens), sources, args.repeats)
    figures = {"seconds": row.seconds, "tokens": row.tokens, "texts": row.texts}
    Path(args.row_out).write_text(json.dumps(figures))
    return 0


@dataclasses.dataclass
class Profile:
    """Where one of our rows spends its time: the decoder network or the rest."""

    # One pass over the set, seconds, under a step counter.
    seconds: float
    # Decoder steps the search ran, and decoder rows over them (sentences x beams).
    steps: int
    rows: int
    # The same number of network steps (`decode_step`) at the mean row count, in a bare
    # compiled loop without the search around it, seconds.
    network_seconds: float


def profile(row: Row, trained, sources: list[str], batch_tokens: int) -> Profile:
    """Counts the decoder steps of `row`'s search and times the network alone for as many."""
    import tensorflow as tf

    from bench.counting import CountingModel
    from translator.constants import BOS_ID
    from translator.inference import Translator
    from translator.search import SearchConfig
    from translator.search.common import shrinking
    from translator.text import default_max_source_length, prepare

    counting = CountingModel(trained.model.for_inference(row.precision))
    translator = Translator(counting, trained.vocabulary, SearchConfig(**row.search), batch_tokens)
    translator.translate(sources)
    counting.reset()
    started = time.perf_counter()
    translator.translate(sources)
    seconds = time.perf_counter() - started
    steps, rows = int(counting.steps.numpy()), int(counting.rows.numpy())

    model, beams = counting.model, row.search["beam_size"]
    count = max(1, rows // steps // beams)  # sentences of the mean step
    cut = default_max_source_length(model.config)
    source = prepare(tf.constant(sources[:count]), trained.vocabulary.source, cut).source_ids
    batches = translator.stats.batches  # of the timed pass
    per_batch = max(1, round(steps / batches))  # steps of a batch's search, on average

    @tf.function
    def network(source):  # the search's cache: growing, cross-attention shared by beams
        encoder_output = model.encode(source)  # [count, width, d_model]
        ids = tf.fill([tf.shape(source)[0] * beams], BOS_ID)  # [rows]
        for _ in tf.range(batches):
            cache = model.init_cache(encoder_output, source, None).for_beams(beams)
            for step in tf.range(per_batch):
                tf.autograph.experimental.set_loop_options(
                    shape_invariants=[(cache, shrinking(cache))]
                )
                logits, cache = model.decode_step(ids, cache, step)
                ids = tf.argmax(logits, -1, output_type=tf.int32)  # [rows]
        return ids

    network(source)  # trace
    network_seconds = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        network(source).numpy()
        network_seconds = min(network_seconds, time.perf_counter() - started)
    return Profile(seconds, steps, rows, network_seconds)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.measure_row is not None:
        return child_main(args)
    import sacrebleu

    from translator.artifacts import load_model_dir
    from translator.ctranslate2 import export_ctranslate2

    needed = (SOURCE, REFERENCE) + (("train.en.gz", "train.de.gz") if not args.model else ())
    data = find_data(args.data, files=needed)
    sources = read_lines(data / SOURCE, args.sentences or 0)
    references = read_lines(data / REFERENCE, args.sentences or 0)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {machine_summary()}; load average {load}")
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as scratch:
        model_dir = args.model or tiny_random_model(Path(scratch), data)
        trained = load_model_dir(model_dir)
        for quantization in ("float32", "int8"):  # the children load them from the scratch
            export_ctranslate2(trained, Path(scratch) / quantization, quantization)
        table = rows(args.short)
        for index, row in enumerate(table):
            print(f"measuring {row.name} (its own process)", flush=True)
            figures = measure_in_child(index, args, model_dir, Path(scratch), data)
            row.seconds, row.tokens = figures["seconds"], figures["tokens"]
            row.texts = figures["texts"]
        table_ours = [r for r in table if r.engine == "tensorflow" and r.search["beam_size"] == 4]
        ours = max(table_ours, key=lambda r: r.rate)
        where = profile(ours, trained, sources, args.batch_tokens) if not ours.xla else None
    by_name = {row.name: row for row in table}
    for row in table:
        row.bleu = sacrebleu.corpus_bleu(row.texts, [references]).score
        if row.compared_with:
            pairs = zip(row.texts, by_name[row.compared_with].texts, strict=True)
            row.same = sum(a == b for a, b in pairs) / len(row.texts)
    print(render("table-head") + "\n" + "\n".join(table_row(r) for r in table))

    theirs = by_name["CTranslate2 float32, beam 4"]
    ratio = ours.rate / theirs.rate
    precision = trained.model.dtype_policy.name
    if where is not None:
        print(
            f"{ours.name}: {where.steps} decoder steps, {where.rows / where.steps:.0f} rows on "
            f"average; the network alone {where.network_seconds:.2f} s of {where.seconds:.2f} s"
        )
    int8_loss = theirs.bleu - by_name["CTranslate2 int8, beam 4"].bleu
    report_target(f"decoding {ours.name} over CTranslate2 float32 beam 4", ratio, RATIO_GOAL, "x")
    if not args.short:  # a random model's BLEU is ~0: its int8 loss says nothing
        report_target(
            "CTranslate2 int8 beam 4 BLEU loss against float32",
            int8_loss,
            INT8_BLEU_LOSS,
            "BLEU",
            higher_is_better=False,
        )
    if args.write:
        section = render(
            "section",
            sentences=len(sources),
            model=str(model_dir),
            batch_tokens=args.batch_tokens,
            repeats=args.repeats,
            table="\n".join(table_row(r) for r in table),
            ours=ours.name,
            ratio=ratio,
            goal=RATIO_GOAL,
            verdict="meets" if ratio >= RATIO_GOAL else "misses",
            int8_loss=int8_loss,
            int8_verdict="within" if int8_loss <= INT8_BLEU_LOSS else "outside",
            int8_goal=INT8_BLEU_LOSS,
            precision=precision,
            why_misses=why_misses(ratio, where, theirs),
            command=command_line(),
            date=today(),
            machine=machine_summary(),
            load=load,
        )
        path = update_section(
            "engines", section, args.results or Path(__file__).with_name("RESULTS.md")
        )
        print(f"wrote the engines section of {path}")
    return 0


def why_misses(ratio: float, where: Profile | None, theirs: Row) -> str:
    """The profile bullet when ours misses the ratio ('' when it meets it)."""
    if ratio >= RATIO_GOAL or where is None:
        return ""
    share = where.network_seconds / where.seconds
    return (
        render(
            "why-misses",
            steps=where.steps,
            rows=where.rows / where.steps,
            network=where.network_seconds,
            seconds=where.seconds,
            share=share,
            rest=where.seconds - where.network_seconds,
            theirs=theirs.seconds,
            name=theirs.name,
        )
        + "\n"
    )


def table_row(row: Row) -> str:
    """The table row of one engine and search."""
    same = "" if row.same is None else f"{row.same:.1%} of `{row.compared_with}`"
    figures = dict(name=row.name, rate=row.rate, bleu=row.bleu, seconds=row.seconds, same=same)
    return render("table-row", **figures)


if __name__ == "__main__":
    sys.exit(main())
