"""The budget planner's trial grid: does the plan match the best setting of each cell?

    python -m bench.planner [--sizes 3000,29000] [--budgets 2] [--report-only] [--short]

A cell is a seeded subset of Multi30k's training pairs (`--sizes`, with the joint vocabulary
`training.plan.choose_vocab_size` picks for it), a direction (`--pairs`) and a budget in
minutes of this machine, turned into the target tokens the planner's speed measurement
says this machine buys in that time, so trials do not depend on other load. In each cell
the plan trains beside variants that change one of its choices (dropout, batch tokens),
scored by greedy BLEU on the validation set. The rule was fit on the 2-minute cells
(`FIT_BUDGETS`, `FIT_CELLS`); the others are held out. Trials are kept in
WORKDIR/trials.json, so an interrupted run goes on where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import harness

render = harness.Template("planner")
DEFAULT_WORKDIR = Path("runs/bench-planner")
# The cells the rule's constants were fit on (with the minutes table's earlier trials):
# every 2-minute cell, and any single cells named in FIT_CELLS.
FIT_BUDGETS = {2.0}
FIT_CELLS: set[tuple[int, str, float]] = set()
SUBSET_SEED = 1


@dataclasses.dataclass(frozen=True)
class Cell:
    """One corpus, direction and budget."""

    pairs: int
    direction: str
    minutes: float

    name = property(lambda self: f"{self.pairs}-{self.direction}-{self.minutes:g}min")

    @property
    def held_out(self) -> bool:
        fit = (self.pairs, self.direction, self.minutes) in FIT_CELLS
        return not (fit or self.minutes in FIT_BUDGETS)


def parse_args(argv: list[str] | None):
    parser = harness.make_parser("planner", __doc__)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--sizes", help="corpus sizes, in pairs (3000,10000,29000)")
    parser.add_argument("--pairs", help="directions (en-de,de-en)")
    parser.add_argument("--budgets", help="budgets, in minutes of this machine (2,5)")
    parser.add_argument("--report-only", action="store_true", help="write from trials.json")
    defaults = dict(sizes=("3000,10000,29000", "400"), pairs=("en-de,de-en", "en-de"))
    args = harness.parse(parser, argv, budgets=("2,5", "0.05"), **defaults)
    args.sizes = [int(item) for item in args.sizes.split(",")]
    args.pairs = args.pairs.split(",")
    args.budgets = [float(item) for item in args.budgets.split(",")]
    if args.short:
        args.workdir = Path(tempfile.mkdtemp(prefix="bench-planner-"))
    return args


def make_corpus(data: Path, workdir: Path, pairs: int) -> Path:
    """A seeded subset of Multi30k's training pairs and its planned joint vocabulary."""
    from training.plan import choose_vocab_size
    from training.planning import count_characters
    from translator.io import read_lines, write_atomic
    from translator.pipelines import build_vocabulary

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


def measure_speeds(data: Path, workdir: Path, short: bool) -> dict:
    """The planner's speeds of its shapes on this machine (timed once, then cached)."""
    cache = workdir / "speeds.json"
    if cache.is_file():
        return json.loads(cache.read_text("utf-8"))
    from training.config import load_config
    from training.plan import SHAPES
    from training.planning import measure_speed
    from training.strategy import make_strategy, select_precision
    from translator.pipelines import load_vocabulary

    corpus = make_corpus(data, workdir, 400 if short else 29000)
    files = [f"data.train_source={corpus / 'train.en'}", f"data.train_target={corpus / 'train.de'}"]
    lengths = ["data.pipeline.max_source_length=128", "data.pipeline.max_target_length=128"]
    config, strategy = load_config(None, files + lengths), make_strategy("auto")
    vocabulary, speeds = load_vocabulary(corpus / "vocab"), {}
    for shape in SHAPES[: 1 if short else 2]:  # narrow and small: what these corpora allow
        speed = measure_speed(shape, 2048, config, vocabulary, strategy, 5 if short else 30)
        speeds[shape.name] = dataclasses.asdict(speed)
        print(f"speed {shape.name}: {speed}", flush=True)
    result = {"precision": select_precision("auto", strategy), "speeds": speeds}
    cache.write_text(json.dumps(result, indent=2), "utf-8")
    return result


def settings_of(plan) -> dict:
    """What a trial trains: the plan's shape, batch, dropout, learning rate and warmup."""
    keys = dict(batch_tokens="data.pipeline.batch_tokens", dropout="model.overrides.dropout")
    keys |= dict(peak_learning_rate="optimizer.peak_learning_rate")
    keys |= dict(warmup_fraction="optimizer.warmup_fraction")
    return {"shape": plan.shape, **{name: plan.value(key) for name, key in keys.items()}}


def trial_key(settings: dict) -> str:
    """A trial's name: the settings that tell it from the cell's other trials."""
    shape, batch = settings["shape"].name, settings["batch_tokens"]
    return f"{shape}, batch {batch:,}, dropout {settings['dropout']}"


def variants(plan) -> list[dict]:
    """The plan, and the plan with one choice changed (the other dropout, batch halved and
    doubled); learning rate and warmup stay the plan's."""
    base = settings_of(plan)
    batch, dropout = base["batch_tokens"], 0.1 if base["dropout"] >= 0.2 else 0.3
    changes = [{}, {"dropout": dropout}, {"batch_tokens": batch // 2}, {"batch_tokens": batch * 2}]
    return [{**base, **change} for change in changes]


def run_trial(cell: Cell, settings: dict, plan, corpus: Path, data: Path, args) -> dict:
    """Trains one setting for the cell's tokens; returns its validation BLEU and updates."""
    source, target = cell.direction.split("-")
    shape = settings["shape"]
    updates = max(
        1, round(plan.tokens / plan.speeds[shape.name].at_batch(settings["batch_tokens"]))
    )
    name = trial_key(settings).replace(", ", "-").replace(" ", "").replace(",", "")
    run_dir = args.workdir / "trials" / cell.name / name
    overrides = {f"model.overrides.{k}": v for k, v in shape.model_overrides().items()}
    sets = {
        "data.train_source": corpus / f"train.{source}",
        "data.train_target": corpus / f"train.{target}",
        "data.valid_source": data / f"val.{source}.gz",
        "data.valid_target": data / f"val.{target}.gz",
        "data.vocabulary": corpus / "vocab",
        "model.preset": shape.preset,
        **overrides,
        "model.overrides.dropout": settings["dropout"],
        "data.pipeline.batch_tokens": settings["batch_tokens"],
        "optimizer.peak_learning_rate": settings["peak_learning_rate"],
        "optimizer.warmup_fraction": settings["warmup_fraction"],
        "train.max_steps": updates,
        "train.max_minutes": 0,
        "eval.every_steps": 0,
        "eval.max_sentences": 50 if args.short else 0,
        "checkpoint.every_steps": 1000000,
        "train.log_every_steps": 1000,
    }
    command = harness.translator_command("train", "--no-plan", f"--run-dir={run_dir}")
    command += [f"--set={key}={value}" for key, value in sets.items()]
    print(" ".join(command[1:]), flush=True)
    subprocess.run(command, check=True)
    metadata = json.loads((run_dir / "model" / "metadata.json").read_text("utf-8"))
    kept = {key: settings[key] for key in ("batch_tokens", "dropout", "warmup_fraction")}
    return {
        "bleu": metadata["best_validation_bleu"],
        "updates": metadata["step"],
        "shape": shape.name,
        **kept,
    }


def cell_plan(cell: Cell, data: Path, speeds: dict, args):
    """The cell's corpus and the plan the current rule makes for it."""
    from training.plan import Budget, CorpusCounts, Speed, make_plan
    from training.planning import count_characters
    from translator.pipelines import PipelineConfig, load_vocabulary, scan_corpus

    corpus = make_corpus(data, args.workdir, cell.pairs)
    files = [corpus / f"train.{side}" for side in cell.direction.split("-")]
    stats = scan_corpus(*files, load_vocabulary(corpus / "vocab"), PipelineConfig())
    counts = CorpusCounts(stats.pairs, count_characters(*files), stats.target_tokens)
    table = {name: Speed(**speed) for name, speed in speeds["speeds"].items()}
    return corpus, make_plan(counts, Budget(seconds=cell.minutes * 60), table)


def run_cell(cell: Cell, data: Path, speeds: dict, results: dict, args) -> None:
    """Trains the cell's plan and its variants, those not trained before (kept by their
    settings, so a refit rule whose plan was trained before reuses that trial)."""
    from translator.io import write_atomic

    corpus, plan = cell_plan(cell, data, speeds, args)
    entry = results.setdefault(cell.name, {"trials": {}})
    entry["cell"] = dataclasses.asdict(cell)
    for settings in variants(plan):
        if trial_key(settings) not in entry["trials"]:
            trial = run_trial(cell, settings, plan, corpus, data, args)
            entry["trials"][trial_key(settings)] = trial
            write_atomic(args.workdir / "trials.json", json.dumps(results, indent=2))


def cell_rows(cells: list[Cell], results: dict, data: Path, speeds: dict, args):
    """The table rows, one per trial, and the largest gap of a held-out cell's plan (the
    current rule's plan; one not trained yet has no gap, and its row says so)."""
    rows, worst = [], None
    for cell in cells:
        trials = results[cell.name]["trials"]
        plan = cell_plan(cell, data, speeds, args)[1]
        plan_key = trial_key(settings_of(plan))
        planned, best = trials.get(plan_key), max(trial["bleu"] for trial in trials.values())
        gap = None if planned is None else best - planned["bleu"]
        if cell.held_out and gap is not None:
            worst = gap if worst is None else max(worst, gap)
        role = render("held-out" if cell.held_out else "fit")
        for name, trial in trials.items():
            is_plan = trial is planned
            rows.append(
                render(
                    "row",
                    cell=cell.name,
                    role=role,
                    epochs=plan.epochs,
                    trial=name,
                    t=trial,
                    plan=render("is-plan") if is_plan else "",
                    mark="**" if trial["bleu"] == best else "",
                    gap=render("gap", gap=gap) if is_plan else "",
                )
            )
        if planned is None:
            rows.append(render("plan-not-trained", cell=cell.name, trial=plan_key))
    return "\n".join(rows), worst


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = harness.find_data(args.data, (*harness.TRAIN, "val.en.gz", "val.de.gz"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    date = harness.today()
    speeds = measure_speeds(data, args.workdir, args.short)
    path = args.workdir / "trials.json"
    results = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    if not args.report_only:
        for minutes in args.budgets:
            for pairs in args.sizes:
                for direction in args.pairs:
                    run_cell(Cell(pairs, direction, minutes), data, speeds, results, args)
    # The table holds every cell trained so far in this work directory, not only these.
    cells = sorted(
        (Cell(**entry["cell"]) for entry in results.values()),
        key=lambda c: (c.minutes, c.pairs, c.direction),
    )
    rows, worst = cell_rows(cells, results, data, speeds, args)
    print(rows, flush=True)
    if worst is not None and not args.short:
        name = "planner: the plan's validation BLEU below the cell's best (held-out cells, max)"
        harness.report_target(name, worst, 1.0, "BLEU", higher_is_better=False)
    harness.publish(args, "planner", section_markdown, rows, speeds, worst, date)
    return 0


def section_markdown(rows: str, speeds: dict, worst: float | None, date: str) -> str:
    """The section: the template filled with the grid's rows and figures."""
    timed = ", ".join(
        f"{name} {s['tokens_per_second']:,.0f} target tok/s" for name, s in speeds["speeds"].items()
    )
    worst = render("not-available") if worst is None else f"{worst:.2f}"
    figures = {**harness.footer(), "date": date}  # the date the run started
    return render(
        "section", **figures, rows=rows, speeds=timed, precision=speeds["precision"], worst=worst
    )


if __name__ == "__main__":
    sys.exit(main())
