"""Our search against CTranslate2 on the same trained model (--short: a tiny random one),
through the same `Translator` text path; each row in a process of its own."""

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu

from bench import harness
from translator.artifacts import load_model_dir, resolve_model_dir
from translator.constants import DEFAULT_PARALLEL_BATCHES
from translator.engines import InferenceOptions, load_translator
from translator.io import read_lines
from translator.search import SearchConfig

render = harness.Template("engines")
RATIO_GOAL = 1.0  # ours over CTranslate2 float32, beam 4, target tokens/s (issue 29)
INT8_BLEU_LOSS = 0.5  # int8 BLEU may lose at most this much against float32
BATCH_TOKENS = 4096
BEAM = dict(beam_size=4)
CT2_RULES = dict(beam_size=4, exact_stop=False, length_penalty_form="power")
GREEDY = dict(beam_size=1)
TOP = "ours, beam 4 (top-beam stop, length ** 0.6)"  # our search under CTranslate2's rules
THEIRS = "CTranslate2 float32, beam 4"
ONE_AT_A_TIME = "one batch at a time"  # our row run with --parallel-batches 1
REPLICAS = 2  # CTranslate2's row with this many replicas fed at once (--parallel-batches)
THEIRS_REPLICAS = f"{THEIRS}, {REPLICAS} replicas"
PAIR_ROUNDS = (1, 3)  # (--short, full) rounds of the ratio's rows, each keeping its best
# Time to the first translation (`echo LINE | translator translate`, the whole process):
# ours with its search cache within FIRST_GOAL times CTranslate2's (issue 29).
FIRST_LINE, FIRST_GOAL = "A man is riding a bike.", 1.3
FIRST_ROUNDS = (1, 3)  # --short, full: rounds of the paths in turn, the median counted
SERVE = "translator serve on the export, start to first answer"


@dataclasses.dataclass
class Row:
    """One engine ("tensorflow" or the export's quantization) and search, and its figures."""

    name: str
    engine: str
    search: dict
    xla: bool = False
    precision: str = "model"  # ours: as `translate --precision`
    parallel: int | None = None  # batches at once (`--parallel-batches`; the engine's default)
    compared_with: str = ""
    seconds: float = float("inf")  # of the best pass
    tokens: int = 0
    texts: list[str] = dataclasses.field(default_factory=list)
    bleu: float = 0.0

    rate = property(lambda self: self.tokens / self.seconds)


def rows(short: bool) -> list[Row]:
    ours = [Row("ours, beam 4 (exact stop)", "tensorflow", BEAM)]
    ours += [Row(TOP, "tensorflow", CT2_RULES), Row("ours, greedy", "tensorflow", GREEDY)]
    if not short:
        ours += [
            Row("ours, beam 4 (exact stop), XLA", "tensorflow", BEAM, xla=True),
            Row(f"{TOP}, XLA", "tensorflow", CT2_RULES, xla=True),
            Row(f"{TOP}, float32", "tensorflow", CT2_RULES, precision="float32"),
            Row(f"{TOP}, {ONE_AT_A_TIME}", "tensorflow", CT2_RULES, parallel=1),
        ]
    searches = {"beam 4": (CT2_RULES, TOP), "greedy": (GREEDY, "ours, greedy")}
    theirs = [
        Row(f"CTranslate2 {q}, {label}", q, search, compared_with=nearest)
        for q in ("float32", "int8")
        for label, (search, nearest) in searches.items()
    ]
    if not short:
        name = THEIRS_REPLICAS
        theirs.append(Row(name, "float32", CT2_RULES, compared_with=TOP, parallel=REPLICAS))
    return ours + theirs


def measure_row(args) -> int:
    """`--row`, in a child process: that row's best pass over the test sentences."""
    data = harness.find_data(args.data, files=(harness.TEST_SOURCE,))
    sources = read_lines(data / harness.TEST_SOURCE, args.sentences)
    row = rows(args.short)[int(args.row)]
    ours = row.engine == "tensorflow"
    engine, path = ("tensorflow", args.model) if ours else ("ctranslate2", args.exports)
    path = Path(path) if ours else Path(path) / row.engine
    options = InferenceOptions(
        BATCH_TOKENS,
        parallel_batches=row.parallel,
        xla=row.xla,
        engine=engine,
        precision=row.precision,
    )
    translator = load_translator(path, SearchConfig(**row.search), options).translator
    # The warm-up pass traces, compiles with XLA and fills CTranslate2's caches.
    seconds, result = harness.best_of(lambda: translator.search(sources), args.repeats)
    figures = {"seconds": seconds, "tokens": result.stats.target_tokens, "texts": result.texts}
    Path(args.child_out).write_text(json.dumps(figures))
    return 0


def measure_in_child(row: Row, index: int, options: list[str]) -> None:
    """Measures `row` (at `index` of the table) in a fresh process; keeps its best pass."""
    figures = harness.run_child("engines", f"--row={index}", *options)  # seconds, tokens, texts
    if figures["seconds"] < row.seconds:
        vars(row).update(figures)


def translate_once(model: Path, *options: str) -> float:
    """Seconds of `echo FIRST_LINE | translator translate --model MODEL`, a fresh process."""
    command = [sys.executable, "-m", "translator", "translate", f"--model={model}", *options]
    started = time.perf_counter()
    subprocess.run(command, input=FIRST_LINE + "\n", capture_output=True, text=True, check=True)
    return time.perf_counter() - started


def serve_once(export_base: Path, log: Path) -> float:
    """Seconds from starting `translator serve` on an export to its first translation."""
    from serving.client import translate
    from serving.process import ServerProcess

    started = time.perf_counter()
    with ServerProcess(export_base, log) as server:
        server.wait_ready()
        translate([FIRST_LINE], server.url)
        return time.perf_counter() - started


def first_translation(model: Path, ctranslate2: Path, scratch: Path, rounds: int) -> dict:
    """Median seconds to the first translation by path, the paths taking turns, on a copy of
    the model (its first run writes the search cache, as a user's does)."""
    from translator.export import export_model

    copy = shutil.copytree(resolve_model_dir(model), scratch / "first-translation")
    shutil.rmtree(copy / "search-cache", ignore_errors=True)
    export_base = scratch / "first-translation-export"
    export_model(copy, export_base)
    paths = {
        "ours, search cached": lambda: translate_once(copy),
        "ours, --no-search-cache": lambda: translate_once(copy, "--no-search-cache"),
        "CTranslate2 float32": lambda: translate_once(ctranslate2),
        SERVE: lambda: serve_once(export_base, scratch / "serve.log"),
    }
    seconds = {"ours, first run (builds, traces, writes the cache)": [translate_once(copy)]}
    for _ in range(rounds):
        for name, run in paths.items():
            seconds.setdefault(name, []).append(run())
    return {name: statistics.median(values) for name, values in seconds.items()}


def section_markdown(args, sentences, model, precision, table, ours, theirs, int8_loss, first):
    """The section: the template filled with this run's figures (its local names)."""
    ratio, goal, int8_goal = ours.rate / theirs.rate, RATIO_GOAL, INT8_BLEU_LOSS
    verdict = "meets" if ratio >= RATIO_GOAL else "misses"
    int8_verdict = "within" if int8_loss <= INT8_BLEU_LOSS else "outside"
    first_ratio, first_goal, first_line = first_ratio_of(first), FIRST_GOAL, FIRST_LINE
    first_verdict = "meets" if first_ratio <= FIRST_GOAL else "misses"
    first_rounds = FIRST_ROUNDS[0 if args.short else 1]
    pair_rounds = PAIR_ROUNDS[0 if args.short else 1]
    parallel, one_at_a_time, replicas = DEFAULT_PARALLEL_BATCHES, ONE_AT_A_TIME, REPLICAS
    first_table = "\n".join(
        render("first-row", name=name, seconds=value, ratio=value / first["CTranslate2 float32"])
        for name, value in first.items()
    )
    return render("section", **harness.footer(), **locals())


def their_best(table: list[Row]) -> Row:
    """CTranslate2 float32 beam 4 at its faster setting: one replica, or several fed at once."""
    return max((row for row in table if row.name in (THEIRS, THEIRS_REPLICAS)), key=Row.rate.fget)


def first_ratio_of(first: dict) -> float:
    return first["ours, search cached"] / first["CTranslate2 float32"]


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("engines", __doc__, model=True)
    for internal in ("--row", "--exports", "--child-out"):  # one row, in a child process
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = harness.parse(parser, argv, sentences=(0, 48), repeats=(2, 1))
    if not args.model and not args.short:
        parser.error("--model is needed (or --short for a tiny random model)")
    args.batch_tokens = BATCH_TOKENS
    if args.row is not None:
        return measure_row(args)
    from translator.engines.ctranslate2_export import export_ctranslate2

    needed = (harness.TEST_SOURCE, harness.TEST_REFERENCE) + (() if args.model else harness.TRAIN)
    data = harness.find_data(args.data, files=needed)
    references = read_lines(data / harness.TEST_REFERENCE, args.sentences)
    table = rows(args.short)
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as scratch:
        model = args.model or harness.random_model(Path(scratch), data, "tiny", 1000)
        trained = load_model_dir(model)
        for quantization in ("float32", "int8"):  # the children load them from the scratch
            export_ctranslate2(trained, Path(scratch) / quantization, quantization)
        options = [f"--model={model}", f"--exports={scratch}", f"--data={data}"]
        options += ["--short"] if args.short else []
        for index, row in enumerate(table):
            print(f"measuring {row.name} (its own process)", flush=True)
            measure_in_child(row, index, options)
        pair = [i for i, row in enumerate(table) if row.name in (TOP, THEIRS, THEIRS_REPLICAS)]
        for round_ in range(2, PAIR_ROUNDS[0 if args.short else 1] + 1):
            names = " and ".join(table[index].name for index in pair)
            print(f"round {round_} of {names} (a process each)", flush=True)
            for index in pair:
                measure_in_child(table[index], index, options)
        print("measuring the time to the first translation (a process per run)", flush=True)
        rounds = FIRST_ROUNDS[0 if args.short else 1]
        first = first_translation(Path(model), Path(scratch) / "float32", Path(scratch), rounds)
    by_name, text_table = {row.name: row for row in table}, []
    for row in table:  # the row's fields: `row` and `same`
        row.bleu, same = sacrebleu.corpus_bleu(row.texts, [references]).score, ""
        if row.compared_with:
            pairs = zip(row.texts, by_name[row.compared_with].texts, strict=True)
            same = f"{sum(a == b for a, b in pairs) / len(row.texts):.1%} of `{row.compared_with}`"
        text_table.append(render("table-row", row=row, same=same))
    text_table = "\n".join(text_table)
    print(render("table-head") + "\n" + text_table)
    ours = by_name[TOP]  # the same stopping rule and length penalty as CTranslate2's
    theirs = their_best(table)
    int8_loss = by_name[THEIRS].bleu - by_name["CTranslate2 int8, beam 4"].bleu
    name = f"decoding {ours.name} over CTranslate2 float32 beam 4"
    harness.report_target(name, ours.rate / theirs.rate, RATIO_GOAL, "x")
    if not args.short:  # a random model's BLEU is ~0: its int8 loss says nothing
        name = "CTranslate2 int8 beam 4 BLEU loss against float32"
        harness.report_target(name, int8_loss, INT8_BLEU_LOSS, "BLEU", higher_is_better=False)
    for name, value in first.items():
        print(f"first translation, {name}: {value:.2f} s")
    name = "first translation, ours (search cached) over CTranslate2 float32"
    harness.report_target(name, first_ratio_of(first), FIRST_GOAL, "x", higher_is_better=False)
    precision = trained.model.dtype_policy.name
    figures = (len(references), model, precision, text_table, ours, theirs, int8_loss, first)
    return harness.publish(args, "engines", section_markdown, args, *figures)
