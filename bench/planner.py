"""The budget planner's trial grid: does the plan match the best setting of each cell? Each
trial trains the updates its shape and batch make in the cell's minutes at speeds timed
first (load-independent), kept in WORKDIR/trials.json to go on where a run stopped."""

import dataclasses
import json
import random
import tempfile
from itertools import product
from pathlib import Path

from bench import harness
from training.config import (
    BATCH_TOKENS,
    DROPOUT,
    PEAK_LEARNING_RATE,
    WARMUP_FRACTION,
    load_config,
)
from training.engines.tf_strategy import make_strategy, select_precision
from training.planning.measure import TIMED_BATCH_TOKENS, measure_speed
from training.planning.rules import (
    SHAPES,
    Budget,
    CorpusCounts,
    Speed,
    choose_vocab_size,
    make_plan,
)
from training.record import RunRecord
from translator.io import count_characters, read_lines, write_atomic
from translator.pipelines import PipelineConfig, build_vocabulary, load_vocabulary, scan_corpus

render = harness.Template("planner")
DEFAULT_WORKDIR = Path("runs/bench-planner")
# The grid (corpus sizes in pairs, directions, budgets in minutes), full and short.
GRID = {False: ((3000, 10000, 29000), ("en-de", "de-en"), (2.0, 5.0))}
GRID[True] = ((400,), ("en-de",), (0.05,))
FIT_BUDGETS = {2.0}  # the cells the rule was fit on (with the minutes table's earlier trials)
SUBSET_SEED = 1
# A trial's speed is timed longer than a plan's 8 updates (~20% slow: bench/RESULTS.md):
# (seconds at most, warm-up updates, timed updates), full and short.
SPEED_TIMING = {False: (40.0, 10, 150), True: (5, 2, 8)}
# What a trial trains: the plan's keys, given to `translator train --set`.
SETTINGS = dict(
    batch_tokens=BATCH_TOKENS,
    dropout=DROPOUT,
    peak_learning_rate=PEAK_LEARNING_RATE,
    warmup_fraction=WARMUP_FRACTION,
)


@dataclasses.dataclass(frozen=True, order=True)
class Cell:  # in the table's order
    minutes: float
    pairs: int
    direction: str

    name = property(lambda self: f"{self.pairs}-{self.direction}-{self.minutes:g}min")
    held_out = property(lambda self: self.minutes not in FIT_BUDGETS)


def make_corpus(data: Path, workdir: Path, pairs: int) -> Path:
    """A seeded subset of Multi30k's training pairs and its planned joint vocabulary."""
    directory = workdir / "corpora" / str(pairs)
    if (directory / "vocab" / "vocab.json").is_file():
        return directory
    lines = {lang: read_lines(data / f"train.{lang}.gz") for lang in ("en", "de")}
    keep = sorted(random.Random(SUBSET_SEED).sample(range(len(lines["en"])), pairs))
    directory.mkdir(parents=True, exist_ok=True)
    for lang, text in lines.items():
        write_atomic(directory / f"train.{lang}", "".join(f"{text[i]}\n" for i in keep))
    files = [directory / "train.en", directory / "train.de"]
    size = choose_vocab_size(count_characters(*files))
    build_vocabulary(files[:1], files[1:], directory / "vocab", vocab_size=size)
    return directory


def speed_key(shape_name: str, batch_tokens: int) -> str:
    """The entry of one shape at one batch size in speeds.json: `narrow@2048`."""
    return f"{shape_name}@{batch_tokens}"


def measure_speeds(data: Path, workdir: Path, short: bool, needed: set[tuple[str, int]]) -> dict:
    """Speeds of (shape name, batch tokens) pairs, each timed once (kept in speeds.json) on
    the 29k-pair corpus (400 short) whatever the cell's: a token's cost does not depend on it."""
    cache = workdir / "speeds.json"
    result = json.loads(cache.read_text("utf-8")) if cache.is_file() else {}
    # Entries without a batch (`narrow`, not `narrow@2048`) are an older grid's: timed again.
    speeds = {k: v for k, v in result.get("speeds", {}).items() if "@" in k}
    result["speeds"] = speeds
    missing = sorted(pair for pair in needed if speed_key(*pair) not in speeds)
    if not missing:
        return result
    corpus = make_corpus(data, workdir, 400 if short else 29000)
    files = [f"data.train_source={corpus / 'train.en'}", f"data.train_target={corpus / 'train.de'}"]
    lengths = ["data.pipeline.max_source_length=128", "data.pipeline.max_target_length=128"]
    config, strategy = load_config(None, files + lengths), make_strategy("auto")
    vocabulary, shapes = load_vocabulary(corpus / "vocab"), {s.name: s for s in SHAPES}
    result["precision"] = select_precision("auto", strategy)
    seconds, warmup, updates = SPEED_TIMING[short]
    for name, batch in missing:
        timing = dict(warmup=warmup, updates=updates)
        speed = measure_speed(shapes[name], batch, config, vocabulary, strategy, seconds, **timing)
        speeds[speed_key(name, batch)] = dataclasses.asdict(speed)
        print(f"speed {name} at {batch:,} batch tokens: {speed}", flush=True)
        write_atomic(cache, json.dumps(result, indent=2))
    return result


def speeds_by_batch(speeds: dict) -> dict[tuple[str, int], Speed]:
    """Every timed speed by (shape name, batch tokens)."""
    keys = {key: key.split("@") for key in speeds["speeds"]}
    return {(keys[k][0], int(keys[k][1])): Speed(**s) for k, s in speeds["speeds"].items()}


def timed_speeds(speeds: dict, batch_tokens: int = TIMED_BATCH_TOKENS) -> dict[str, Speed]:
    """Per shape name, its speed at `batch_tokens` (the planner's table)."""
    by_batch = speeds_by_batch(speeds).items()
    return {name: speed for (name, batch), speed in by_batch if batch == batch_tokens}


def settings_of(plan) -> dict:
    """What a trial trains: the plan's shape, batch, dropout, learning rate and warmup."""
    return {"shape": plan.shape, **{name: plan.value(key) for name, key in SETTINGS.items()}}


def trial_key(settings: dict) -> str:
    shape, batch = settings["shape"].name, settings["batch_tokens"]
    return f"{shape}, batch {batch:,}, dropout {settings['dropout']}"


def variants(plan, short: bool = False) -> list[dict]:
    """The plan, and the plan with one choice changed (the other dropout, batch halved and
    doubled); learning rate and warmup stay the plan's. Short: the plan and the other
    dropout (a row beside the plan's, at a speed timed already)."""
    base = settings_of(plan)
    batch, dropout = base["batch_tokens"], 0.1 if base["dropout"] >= 0.2 else 0.3
    changes = [{}, {"dropout": dropout}, {"batch_tokens": batch // 2}, {"batch_tokens": batch * 2}]
    return [{**base, **change} for change in changes[: 2 if short else None]]


def trial_updates(cell: Cell, settings: dict, speeds: dict) -> int:
    """The updates one setting makes in the cell's minutes at its own timed speed."""
    key = speed_key(settings["shape"].name, settings["batch_tokens"])
    speed = Speed(**speeds["speeds"][key])
    tokens = speed.tokens_per_second * max(cell.minutes * 60 - speed.startup_seconds, 0.0)
    return max(1, round(tokens / speed.tokens_per_update))


def run_trial(cell: Cell, settings: dict, speeds: dict, corpus: Path, data: Path, args) -> dict:
    """Trains one setting for the cell's time; returns its validation BLEU and updates."""
    (source, target), shape = cell.direction.split("-"), settings["shape"]
    name = trial_key(settings).replace(", ", "-").replace(" ", "").replace(",", "")
    run_dir = args.workdir / "trials" / cell.name / name
    sets = {
        "data.train_source": corpus / f"train.{source}",
        "data.train_target": corpus / f"train.{target}",
        "data.valid_source": data / f"val.{source}.gz",
        "data.valid_target": data / f"val.{target}.gz",
        "data.vocabulary": corpus / "vocab",
        "model.preset": shape.preset,
        **{f"model.overrides.{k}": v for k, v in shape.model_overrides().items()},
        **{str(SETTINGS[key]): settings[key] for key in SETTINGS},
        "train.max_steps": trial_updates(cell, settings, speeds),
        "train.max_minutes": 0,
        "eval.every_steps": 0,
        "eval.max_sentences": 50 if args.short else 0,
        "checkpoint.every_steps": 1000000,
        "train.log_every_steps": 1000,
    }
    options = [f"--set={key}={value}" for key, value in sets.items()]
    harness.run_translator("train", "--no-plan", f"--run-dir={run_dir}", *options)
    record = RunRecord.read(run_dir / "model")
    kept = {key: settings[key] for key in ("batch_tokens", "dropout", "warmup_fraction")}
    bleu, updates = record.best_validation_bleu, record.step
    speed = speeds["speeds"][speed_key(shape.name, settings["batch_tokens"])]
    tokens = updates * speed["tokens_per_update"]
    return {"bleu": bleu, "updates": updates, "tokens": tokens, "shape": shape.name, **kept}


def cell_plan(cell: Cell, data: Path, speeds: dict, args):
    """The cell's corpus and plan: shapes as timed at the planner's batch size, and what
    the budget buys from the chosen batch's own speed where it was timed (as
    `training.planning.plan_run` does)."""
    corpus = make_corpus(data, args.workdir, cell.pairs)
    files = [corpus / f"train.{side}" for side in cell.direction.split("-")]
    stats = scan_corpus(*files, load_vocabulary(corpus / "vocab"), PipelineConfig())
    counts = CorpusCounts(stats.pairs, count_characters(*files), stats.target_tokens)
    budget, batch_speeds = Budget(seconds=cell.minutes * 60), speeds_by_batch(speeds)
    return corpus, make_plan(counts, budget, timed_speeds(speeds), batch_speeds=batch_speeds)


def needed_speeds(cells: list[Cell], data: Path, args) -> set[tuple[str, int]]:
    """The (shape, batch) pairs the cells' trials train, and the planner's timed batch of
    each shape (it times those first: the plans are made from them)."""
    needed = {(shape.name, TIMED_BATCH_TOKENS) for shape in SHAPES[: 1 if args.short else 2]}
    speeds = measure_speeds(data, args.workdir, args.short, needed)
    for cell in cells:
        plan = cell_plan(cell, data, speeds, args)[1]
        needed |= {(s["shape"].name, s["batch_tokens"]) for s in variants(plan, args.short)}
    return needed


def run_cell(cell: Cell, data: Path, speeds: dict, results: dict, args) -> None:
    """Trains the cell's plan and variants, those not trained before (kept by their settings)."""
    corpus, plan = cell_plan(cell, data, speeds, args)
    entry = results.setdefault(cell.name, {"trials": {}})
    entry["cell"] = dataclasses.asdict(cell)
    for settings in variants(plan, args.short):
        # A trial without its tokens is an older grid's (equal tokens, not time): again.
        if "tokens" not in entry["trials"].get(trial_key(settings), {}):
            trial = run_trial(cell, settings, speeds, corpus, data, args)
            entry["trials"][trial_key(settings)] = trial
            write_atomic(args.workdir / "trials.json", json.dumps(results, indent=2))


def cell_rows(cells: list[Cell], results: dict, data: Path, speeds: dict, args):
    """The table rows, one per trial, and the largest gap of a held-out cell's plan (the
    current rule's plan; one not trained yet has no gap, and its row says so)."""
    rows, worst = [], None
    for cell in cells:
        # Time-fair trials only (an older grid's equal-token ones have no tokens).
        trials = {k: t for k, t in results[cell.name]["trials"].items() if "tokens" in t}
        if not trials:
            continue
        plan = cell_plan(cell, data, speeds, args)[1]
        plan_key = trial_key(settings_of(plan))
        planned, best = trials.get(plan_key), max(trial["bleu"] for trial in trials.values())
        gap = None if planned is None else best - planned["bleu"]
        if cell.held_out and gap is not None:
            worst = gap if worst is None else max(worst, gap)
        role = render("held-out" if cell.held_out else "fit")
        for name, t in trials.items():  # the row's fields: these local names
            is_plan = render("is-plan") if t is planned else ""
            mark, gap_text = "**" * (t["bleu"] == best), render("gap", gap=gap) if is_plan else ""
            tokens = f"{t['tokens'] / 1e6:.2f}M" if "tokens" in t else ""
            rows.append(render("row", trial=name, **locals()))
        if planned is None:
            rows.append(render("plan-not-trained", cell=cell.name, trial=plan_key))
    return "\n".join(rows), worst


def section_markdown(rows: str, speeds: dict, worst: float | None, date: str) -> str:
    """The section: the template filled with the grid's rows and figures (its local names)."""
    by_batch = sorted(speeds_by_batch(speeds).items(), key=lambda pair: speed_key(*pair[0]))
    timed = ", ".join(
        f"{name} {s.tokens_per_second:,.0f} target tok/s at {batch:,} batch tokens"
        for (name, batch), s in by_batch  # in speeds.json's key order
    )
    precision = speeds["precision"]
    worst = render("not-available") if worst is None else f"{worst:.2f}"
    return render("section", **{**harness.footer(), **locals()})  # the date the run started


def grid_options(parser) -> None:
    """--sizes, --directions and --budgets: part of the grid (default: all of it)."""
    sizes, directions, budgets = GRID[False]
    parser.add_argument("--sizes", type=int, nargs="+", help=f"corpus sizes in pairs {sizes}")
    parser.add_argument("--directions", nargs="+", help=f"directions {directions}")
    parser.add_argument("--budgets", type=float, nargs="+", help=f"budgets in minutes {budgets}")


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("planner", __doc__)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    grid_options(parser)
    args = harness.parse(parser, argv)
    if args.short:
        args.workdir = Path(tempfile.mkdtemp(prefix="bench-planner-"))
    data = harness.find_data(args.data, (*harness.TRAIN, "val.en.gz", "val.de.gz"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    date = harness.today()
    sizes, directions, budgets = GRID[args.short]
    grid = product(args.budgets or budgets, args.sizes or sizes, args.directions or directions)
    cells = [Cell(minutes, pairs, direction) for minutes, pairs, direction in grid]
    # Every speed the trials need is timed before the first trial (on a quiet machine; the
    # trials themselves then run a fixed number of updates, whatever the load).
    speeds = measure_speeds(data, args.workdir, args.short, needed_speeds(cells, data, args))
    path = args.workdir / "trials.json"
    results = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    for cell in cells:
        run_cell(cell, data, speeds, results, args)
    # The table holds every cell trained so far in this work directory, not only these.
    cells = sorted(Cell(**entry["cell"]) for entry in results.values())
    rows, worst = cell_rows(cells, results, data, speeds, args)
    print(rows, flush=True)
    if worst is not None and not args.short:
        name = "planner: the plan's validation BLEU below the cell's best (held-out cells, max)"
        harness.report_target(name, worst, 1.0, "BLEU", higher_is_better=False)
    return harness.publish(args, "planner", section_markdown, rows, speeds, worst, date)
