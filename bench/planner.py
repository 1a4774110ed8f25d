"""The budget planner's trial grid: does the plan match the best setting of each cell?

    python -m bench.planner                                  # full grid, writes RESULTS.md
    python -m bench.planner --sizes 3000,29000 --budgets 2   # a part of it
    python -m bench.planner --short                          # plumbing only, writes nothing

A cell is a corpus (a seeded subset of Multi30k's training pairs of `--sizes` pairs, with
a joint vocabulary of the size `training.plan.choose_vocab_size` picks for it), a
direction (`--pairs`) and a budget in minutes of this machine (`--budgets`). In each
cell the plan of `training.plan.make_plan` is trained beside variants that change one of
its choices (dropout, batch tokens), and each trial is scored by greedy BLEU on Multi30k's
*validation* set: never a test set.

A budget of M minutes is turned into the target tokens this machine buys in M minutes
(the planner's own speed measurement, once, at the start), and every trial trains that
many tokens as a step budget. So the trials do not depend on what else the machine does
while they run, and a cell is the same experiment on a faster machine.

The rule's constants were fit on the 2-minute cells and one 5-minute cell (`FIT_BUDGETS`,
`FIT_CELLS`) and the minutes table's earlier trials (Multi30k EN->DE, 29,000 pairs, 5 to
60 minutes); every other cell is held out. Results are kept in WORKDIR/trials.json: an interrupted
run goes on where it stopped. The section's words are in bench/templates/planner.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/planner.py`
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

TEMPLATE = TEMPLATES / "planner.md"
template_parts, render = bind_template(TEMPLATE)
DEFAULT_WORKDIR = Path("runs/bench-planner")
# The cells the rule's constants were fit on (with the minutes table's earlier trials,
# Multi30k EN->DE at 5, 15 and 60 minutes): every 2-minute cell. Every other cell is held
# out (FIT_CELLS names single cells, should a fit use one).
FIT_BUDGETS = {2.0}
FIT_CELLS: set[tuple[int, str, float]] = set()
SUBSET_SEED = 1


@dataclasses.dataclass(frozen=True)
class Cell:
    """One corpus, direction and budget."""

    pairs: int
    direction: str
    minutes: float

    @property
    def name(self) -> str:
        return f"{self.pairs}-{self.direction}-{self.minutes:g}min"

    @property
    def held_out(self) -> bool:
        fit = self.minutes in FIT_BUDGETS or (self.pairs, self.direction, self.minutes) in FIT_CELLS
        return not fit


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.planner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="directory with the Multi30k files (default: the mirror)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--sizes", default="3000,10000,29000", help="corpus sizes, in pairs")
    parser.add_argument("--pairs", default="en-de,de-en", help="directions")
    parser.add_argument("--budgets", default="2,5", help="budgets, in minutes of this machine")
    parser.add_argument("--short", action="store_true", help="one tiny cell; writes nothing")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: write the section from the trials in WORKDIR/trials.json",
    )
    args = parser.parse_args(argv)
    if args.short:
        args.sizes, args.pairs, args.budgets = "400", "en-de", "0.05"
    args.sizes = [int(item) for item in args.sizes.split(",")]
    args.pairs = args.pairs.split(",")
    args.budgets = [float(item) for item in args.budgets.split(",")]
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
    build_vocabulary([files[0]], [files[1]], directory / "vocab", vocab_size=size)
    return directory


def measure_speeds(data: Path, workdir: Path, short: bool) -> dict:
    """The planner's speeds of its shapes on this machine (timed once, then cached)."""
    cache = workdir / "speeds.json"
    if cache.is_file():
        return json.loads(cache.read_text("utf-8"))
    import dataclasses as dc

    from training.config import load_config
    from training.plan import SHAPES
    from training.planning import measure_speed
    from training.strategy import make_strategy, select_precision
    from translator.pipelines import load_vocabulary

    corpus = make_corpus(data, workdir, 400 if short else 29000)
    config = load_config(
        None,
        [
            f"data.train_source={corpus / 'train.en'}",
            f"data.train_target={corpus / 'train.de'}",
            "data.pipeline.max_source_length=128",
            "data.pipeline.max_target_length=128",
        ],
    )
    strategy = make_strategy("auto")
    precision = select_precision("auto", strategy)
    vocabulary = load_vocabulary(corpus / "vocab")
    speeds = {}
    for shape in SHAPES[: 1 if short else 2]:  # narrow and small: what these corpora allow
        speed = measure_speed(shape, 2048, config, vocabulary, strategy, 5 if short else 30)
        speeds[shape.name] = dc.asdict(speed)
        print(f"speed {shape.name}: {speed}", flush=True)
    result = {"precision": precision, "speeds": speeds}
    cache.write_text(json.dumps(result, indent=2), "utf-8")
    return result


def settings_of(plan) -> dict:
    """What a trial trains: the plan's shape, batch, dropout, learning rate and warmup."""
    return {
        "shape": plan.shape,
        "batch_tokens": plan.value("data.pipeline.batch_tokens"),
        "dropout": plan.value("model.overrides.dropout"),
        "peak_learning_rate": plan.value("optimizer.peak_learning_rate"),
        "warmup_fraction": plan.value("optimizer.warmup_fraction"),
    }


def trial_key(settings: dict) -> str:
    """A trial's name: the settings that tell it from the cell's other trials."""
    return f"{settings['shape'].name}, batch {settings['batch_tokens']:,}, dropout " + (
        f"{settings['dropout']}"
    )


def variants(plan) -> list[dict]:
    """The plan, and the plan with one choice changed (batch halved and doubled, the
    other dropout); learning rate and warmup stay the plan's."""
    base = settings_of(plan)
    batch = base["batch_tokens"]
    return [
        base,
        {**base, "dropout": 0.1 if base["dropout"] >= 0.2 else 0.3},
        {**base, "batch_tokens": batch // 2},
        {**base, "batch_tokens": batch * 2},
    ]


def run_trial(cell: Cell, settings: dict, plan, corpus: Path, data: Path, args) -> dict:
    """Trains one setting for the cell's tokens; returns its validation BLEU and updates."""
    from training.plan import Speed

    source, target = cell.direction.split("-")
    speed: Speed = plan.speeds[settings["shape"].name]
    updates = max(1, round(plan.tokens / speed.at_batch(settings["batch_tokens"])))
    name = trial_key(settings).replace(", ", "-").replace(" ", "").replace(",", "")
    run_dir = args.workdir / "trials" / cell.name / name
    shape = settings["shape"]
    command = [
        sys.executable,
        "-m",
        "translator",
        "train",
        "--no-plan",
        f"--run-dir={run_dir}",
        f"--set=data.train_source={corpus / f'train.{source}'}",
        f"--set=data.train_target={corpus / f'train.{target}'}",
        f"--set=data.valid_source={data / f'val.{source}.gz'}",
        f"--set=data.valid_target={data / f'val.{target}.gz'}",
        f"--set=data.vocabulary={corpus / 'vocab'}",
        f"--set=model.preset={shape.preset}",
        *(f"--set=model.overrides.{k}={v}" for k, v in shape.model_overrides().items()),
        f"--set=model.overrides.dropout={settings['dropout']}",
        f"--set=data.pipeline.batch_tokens={settings['batch_tokens']}",
        f"--set=optimizer.peak_learning_rate={settings['peak_learning_rate']}",
        f"--set=optimizer.warmup_fraction={settings['warmup_fraction']}",
        f"--set=train.max_steps={updates}",
        "--set=train.max_minutes=0",
        "--set=eval.every_steps=0",
        f"--set=eval.max_sentences={50 if args.short else 0}",
        "--set=checkpoint.every_steps=1000000",
        "--set=train.log_every_steps=1000",
    ]
    print(" ".join(command[1:]), flush=True)
    subprocess.run(command, check=True)
    metadata = json.loads((run_dir / "model" / "metadata.json").read_text("utf-8"))
    return {
        "bleu": metadata["best_validation_bleu"],
        "updates": metadata["step"],
        "shape": shape.name,
        "batch_tokens": settings["batch_tokens"],
        "dropout": settings["dropout"],
        "warmup_fraction": settings["warmup_fraction"],
    }


def cell_plan(cell: Cell, data: Path, speeds: dict, args):
    """The cell's corpus and the plan the current rule makes for it."""
    from training.plan import Budget, CorpusCounts, Speed, make_plan
    from training.planning import count_characters
    from translator.pipelines import PipelineConfig, load_vocabulary, scan_corpus

    corpus = make_corpus(data, args.workdir, cell.pairs)
    source, target = cell.direction.split("-")
    files = (corpus / f"train.{source}", corpus / f"train.{target}")
    stats = scan_corpus(*files, load_vocabulary(corpus / "vocab"), PipelineConfig())
    counts = CorpusCounts(stats.pairs, count_characters(*files), stats.target_tokens)
    table = {name: Speed(**speed) for name, speed in speeds["speeds"].items()}
    return corpus, make_plan(counts, Budget(seconds=cell.minutes * 60), table)


def run_cell(cell: Cell, data: Path, speeds: dict, results: dict, args) -> None:
    """Trains the cell's plan and its variants, those not trained before.

    Trials are kept by their settings, so a refit rule whose plan is a setting trained
    before reuses that trial.
    """
    corpus, plan = cell_plan(cell, data, speeds, args)
    entry = results.setdefault(cell.name, {"trials": {}})
    entry["cell"] = dataclasses.asdict(cell)
    for settings in variants(plan):
        if trial_key(settings) not in entry["trials"]:
            entry["trials"][trial_key(settings)] = run_trial(
                cell, settings, plan, corpus, data, args
            )
            save_results(args.workdir, results)


def save_results(workdir: Path, results: dict) -> None:
    from translator.io import write_atomic

    write_atomic(workdir / "trials.json", json.dumps(results, indent=2))


def cell_rows(cells: list[Cell], results: dict, data: Path, speeds: dict, args):
    """The table rows, one per trial, and the largest gap of a held-out cell's plan.

    The plan of each cell is the current rule's; a cell whose plan was not trained has
    no gap (its row says so).
    """
    rows, worst = [], None
    for cell in cells:
        trials = results[cell.name]["trials"]
        _, plan = cell_plan(cell, data, speeds, args)
        planned = trials.get(trial_key(settings_of(plan)))
        best = max(trial["bleu"] for trial in trials.values())
        gap = None if planned is None else best - planned["bleu"]
        if cell.held_out and gap is not None:
            worst = gap if worst is None else max(worst, gap)
        for name, trial in trials.items():
            rows.append(
                render(
                    "row",
                    cell=cell.name,
                    role=render("held-out" if cell.held_out else "fit"),
                    epochs=plan.epochs,
                    trial=name,
                    plan=render("is-plan") if trial is planned else "",
                    warmup=trial["warmup_fraction"],
                    updates=trial["updates"],
                    bleu=trial["bleu"],
                    mark="**" if trial["bleu"] == best else "",
                    gap=render("gap", gap=gap) if trial is planned else "",
                )
            )
        if planned is None:
            rows.append(
                render("plan-not-trained", cell=cell.name, trial=trial_key(settings_of(plan)))
            )
    return "\n".join(rows), worst


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = find_data(args.data, ("train.en.gz", "train.de.gz", "val.en.gz", "val.de.gz"))
    if args.short:
        import tempfile

        args.workdir = Path(tempfile.mkdtemp(prefix="bench-planner-"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    started = today()
    speeds = measure_speeds(data, args.workdir, args.short)
    path = args.workdir / "trials.json"
    results = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    cells = [
        Cell(pairs, direction, minutes)
        for minutes in args.budgets
        for pairs in args.sizes
        for direction in args.pairs
    ]
    for cell in [] if args.report_only else cells:
        run_cell(cell, data, speeds, results, args)
    # The table holds every cell trained so far in this work directory, not only these.
    done = sorted(
        (Cell(**entry["cell"]) for entry in results.values()),
        key=lambda c: (c.minutes, c.pairs, c.direction),
    )
    rows, worst = cell_rows(done, results, data, speeds, args)
    print(rows, flush=True)
    if worst is not None and not args.short:
        report_target(
            "planner: the plan's validation BLEU below the cell's best (held-out cells, max)",
            worst,
            1.0,
            "BLEU",
            higher_is_better=False,
        )
    if not args.short:
        update_section(
            "planner",
            render(
                "section",
                rows=rows,
                speeds=", ".join(
                    f"{name} {speed['tokens_per_second']:,.0f} target tok/s"
                    for name, speed in speeds["speeds"].items()
                ),
                precision=speeds["precision"],
                worst=render("not-available") if worst is None else f"{worst:.2f}",
                command=command_line(),
                date=started,
                machine=machine_summary(),
            ),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
