"""Our search against CTranslate2 on the same trained model: speed and BLEU.

    python -m bench.engines --model runs/bench-recipe/run   # or --short: a tiny random model

The model is exported with `translator export --format ctranslate2` (float32 and int8);
every engine translates Multi30k test_2016_flickr (English) through the same `Translator`
text path, so the figures differ only by the search. Each row runs in a process of its
own (in one process the engines slowed each other), a warm-up pass then the best of
`--repeats`. Where ours misses the ratio, the network alone is timed for as many steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import harness
from translator.io import read_lines

render = harness.Template("engines")
RATIO_GOAL = 0.7  # ours over CTranslate2 float32, beam 4, target tokens/s (issue 16)
INT8_BLEU_LOSS = 0.5  # int8 BLEU may lose at most this much against float32
BEAM = dict(beam_size=4)
CT2_RULES = dict(beam_size=4, exact_stop=False, length_penalty_form="power")
GREEDY = dict(beam_size=1)


@dataclasses.dataclass
class Row:
    """One engine's search (engine: "tensorflow" or the export's quantization), its figures."""

    name: str
    engine: str
    search: dict
    xla: bool = False
    precision: str = "model"  # ours: as `translate --precision`
    seconds: float = float("inf")  # of the best pass
    tokens: int = 0
    bleu: float = 0.0
    texts: list[str] = dataclasses.field(default_factory=list)
    # The row whose translations this one is compared with, and the share that are equal.
    compared_with: str = ""
    same: float | None = None

    rate = property(lambda self: self.tokens / self.seconds)


def rows(short: bool) -> list[Row]:
    """The engines and searches measured, in order."""
    top = "ours, beam 4 (top-beam stop, length ** 0.6)"
    ours = [Row("ours, beam 4 (exact stop)", "tensorflow", BEAM)]
    ours += [Row(top, "tensorflow", CT2_RULES), Row("ours, greedy", "tensorflow", GREEDY)]
    if not short:
        ours += [
            Row("ours, beam 4 (exact stop), XLA", "tensorflow", BEAM, xla=True),
            Row(f"{top}, XLA", "tensorflow", CT2_RULES, xla=True),
            Row(f"{top}, float32", "tensorflow", CT2_RULES, precision="float32"),
        ]
    nearest = {"beam 4": top, "greedy": "ours, greedy"}  # our search under the nearest rules
    searches = {"beam 4": CT2_RULES, "greedy": GREEDY}
    return ours + [
        Row(f"CTranslate2 {q}, {label}", q, search, compared_with=nearest[label])
        for q in ("float32", "int8")
        for label, search in searches.items()
    ]


def parse_args(argv: list[str] | None):
    parser = harness.make_parser("engines", __doc__)
    parser.add_argument("--model", help="trained model or run directory")
    parser.add_argument("--sentences", type=int, help="first N test sentences (all; short 48)")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="default: %(default)s")
    parser.add_argument("--repeats", type=int, help="timed passes (default: 2; short 1)")
    for internal in ("--measure-row", "--exports", "--row-out"):  # one row, in a child
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = harness.parse(parser, argv, sentences=(0, 48), repeats=(2, 1))
    if not args.model and not args.short:
        parser.error("--model is needed (or --short for a tiny random model)")
    return args


def tiny_random_model(root: Path, data: Path) -> Path:
    """A tiny random model with a real Multi30k vocabulary, saved as a model directory."""
    import keras

    from translator import Transformer, TransformerConfig
    from translator.artifacts import save_model_dir
    from translator.pipelines.vocab import build_vocabulary

    build_vocabulary(
        [data / "train.en.gz"], [data / "train.de.gz"], root / "vocab", vocab_size=1000
    )
    keras.utils.set_random_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=1000))
    model.build()
    return save_model_dir(root / "model", model, root / "vocab", {"note": "random weights"})


def load_engine(row: Row, model: Path, exports: Path, batch_tokens: int):
    """The `Translator` of a row: ours on `model`, or CTranslate2 on its export."""
    from translator.engines import InferenceOptions, load_translator
    from translator.search import SearchConfig

    ours = row.engine == "tensorflow"
    engine, path = ("tensorflow", model) if ours else ("ctranslate2", exports / row.engine)
    options = InferenceOptions(batch_tokens, xla=row.xla, engine=engine, precision=row.precision)
    return load_translator(path, SearchConfig(**row.search), options).translator


def measure_in_child(index: int, args, model_dir: Path, exports: Path, data: Path) -> dict:
    """Row `index` measured in a process of its own: {seconds, tokens, texts}.

    In one process the engines slowed each other (CTranslate2 beam 4: ~9,000 tok/s in a
    fresh process, ~5,000 once another engine had run there).
    """
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        options = dict(measure_row=index, model=model_dir, exports=exports, data=data)
        options.update(batch_tokens=args.batch_tokens, repeats=args.repeats, row_out=out.name)
        options.update(sentences=args.sentences)
        command = [sys.executable, "-m", "bench.engines", *(["--short"] if args.short else [])]
        command += [f"--{key.replace('_', '-')}={value}" for key, value in options.items()]
        subprocess.run(command, check=True, cwd=harness.REPO)
        return json.loads(Path(out.name).read_text())


def child_main(args) -> int:
    """`--measure-row`: one row's figures, as JSON in `--row-out`."""
    data = harness.find_data(args.data, files=(harness.TEST_SOURCE,))
    sources = read_lines(data / harness.TEST_SOURCE, args.sentences)
    row = rows(args.short)[int(args.measure_row)]
    translator = load_engine(row, Path(args.model), Path(args.exports), args.batch_tokens)
    seconds, (texts, tokens) = harness.best_of(
        lambda: _texts_and_tokens(translator.search(sources)), args.repeats
    )  # the warm-up pass traces, compiles with XLA and fills CTranslate2's caches
    result = {"seconds": seconds, "tokens": tokens, "texts": texts}
    Path(args.row_out).write_text(json.dumps(result))
    return 0


def _texts_and_tokens(translations) -> tuple[list[str], int]:
    return translations.texts, translations.stats.target_tokens


@dataclasses.dataclass
class Profile:
    """Where one of our rows spends its time: one pass, its decoder steps and rows, and the
    same number of network steps alone (a bare compiled loop), seconds."""

    seconds: float
    steps: int
    rows: int
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
    config = SearchConfig(**row.search)
    translator = Translator.from_model(
        counting, trained.vocabulary, config, batch_tokens=batch_tokens
    )
    translator.translate(sources)
    counting.reset()
    seconds, translations = harness.best_of(lambda: translator.search(sources), 1, warmup=0)
    steps, rows = int(counting.steps.numpy()), int(counting.rows.numpy())

    model, beams = counting.model, row.search["beam_size"]
    count = max(1, rows // steps // beams)  # sentences of the mean step
    cut = default_max_source_length(model.config)
    source = prepare(tf.constant(sources[:count]), trained.vocabulary.source, cut).source_ids
    batches = translations.stats.batches  # of the timed pass
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

    network_seconds, _ = harness.best_of(lambda: network(source).numpy(), 2)
    return Profile(seconds, steps, rows, network_seconds)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.measure_row is not None:
        return child_main(args)
    import sacrebleu

    from translator.artifacts import load_model_dir
    from translator.engines.ctranslate2_export import export_ctranslate2

    needed = (harness.TEST_SOURCE, harness.TEST_REFERENCE) + (() if args.model else harness.TRAIN)
    data = harness.find_data(args.data, files=needed)
    sources = read_lines(data / harness.TEST_SOURCE, args.sentences)
    references = read_lines(data / harness.TEST_REFERENCE, args.sentences)
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as scratch:
        model_dir = Path(args.model or tiny_random_model(Path(scratch), data))
        trained = load_model_dir(model_dir)
        for quantization in ("float32", "int8"):  # the children load them from the scratch
            export_ctranslate2(trained, Path(scratch) / quantization, quantization)
        table = rows(args.short)
        for index, row in enumerate(table):
            print(f"measuring {row.name} (its own process)", flush=True)
            figures = measure_in_child(index, args, model_dir, Path(scratch), data)
            row.seconds, row.tokens, row.texts = (
                figures["seconds"],
                figures["tokens"],
                figures["texts"],
            )
        ours = max((r for r in table if r.name.startswith("ours, beam 4")), key=lambda r: r.rate)
        where = None if ours.xla else profile(ours, trained, sources, args.batch_tokens)
    by_name = {row.name: row for row in table}
    for row in table:
        row.bleu = sacrebleu.corpus_bleu(row.texts, [references]).score
        if row.compared_with:
            pairs = zip(row.texts, by_name[row.compared_with].texts, strict=True)
            row.same = sum(a == b for a, b in pairs) / len(row.texts)
    text_table = "\n".join(table_row(r) for r in table)
    print(render("table-head") + "\n" + text_table)
    theirs = by_name["CTranslate2 float32, beam 4"]
    ratio = ours.rate / theirs.rate
    int8_loss = theirs.bleu - by_name["CTranslate2 int8, beam 4"].bleu
    harness.report_target(
        f"decoding {ours.name} over CTranslate2 float32 beam 4", ratio, RATIO_GOAL, "x"
    )
    if not args.short:  # a random model's BLEU is ~0: its int8 loss says nothing
        name = "CTranslate2 int8 beam 4 BLEU loss against float32"
        harness.report_target(name, int8_loss, INT8_BLEU_LOSS, "BLEU", higher_is_better=False)
    precision = trained.model.dtype_policy.name
    figures = (len(sources), model_dir, precision, text_table, ours, theirs, int8_loss, where)
    harness.publish(args, "engines", section_markdown, args, *figures)
    return 0


def section_markdown(args, sentences, model, precision, table, ours, theirs, int8_loss, where):
    """The section: the template filled with this run's figures (its local names)."""
    ratio, goal, int8_goal = ours.rate / theirs.rate, RATIO_GOAL, INT8_BLEU_LOSS
    verdict = "meets" if ratio >= RATIO_GOAL else "misses"
    int8_verdict = "within" if int8_loss <= INT8_BLEU_LOSS else "outside"
    why = ""
    if ratio < RATIO_GOAL and where is not None:  # the profile: where the time goes
        rows, rest = where.rows / where.steps, where.seconds - where.network_seconds
        share = where.network_seconds / where.seconds
        why = render("why-misses", p=where, rows=rows, rest=rest, share=share, theirs=theirs)
        why += "\n"
    return render("section", **harness.footer(), **locals())


def table_row(row: Row) -> str:
    """The table row of one engine and search."""
    same = "" if row.same is None else f"{row.same:.1%} of `{row.compared_with}`"
    return render("table-row", row=row, same=same)


if __name__ == "__main__":
    sys.exit(main())
