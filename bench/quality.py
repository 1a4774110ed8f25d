"""Time to quality: the recipe's 5-, 15- and 60-minute models on Multi30k test_2016_flickr.

    python -m bench.quality                       # full: 8 recipes, ~3 h of training
    python -m bench.quality --workdir runs/m30k   # the 60-minute run there (and siblings)
    python -m bench.quality --budgets 5           # one budget
    python -m bench.quality --short               # tiny model, 20 s of training, 50 sentences

Full mode runs `translator recipe --minutes M` for each budget (fetch, vocabulary, the
plan `training/plan.py` makes for that budget on this machine, M minutes of training,
beside the minutes table the planner replaced as its baseline, `--table-budgets`, and
DE->EN, `--de-en-budgets`;
beam-4 translation of test_2016_flickr scored by sacreBLEU: cased, 13a,
detokenized) and writes the "quality" section of bench/RESULTS.md: per budget the test
BLEU, chrF, TER, the updates and target tokens the budget bought, and the validation
curve of the 60-minute run. The 60-minute recipe works in `--workdir`, the others beside
it (`WORKDIR-5min`, `WORKDIR-15min`, `WORKDIR-5min-table`, `WORKDIR-5min-de-en`, ...); a
work directory that already holds a finished run is reported on as it is (the recipe
skips the stages already done), so the hours are not spent twice.

The section's words are in bench/templates/quality.md; this module reads the runs'
figures and fills them in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/quality.py`
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

# Test BLEU (cased sacreBLEU, beam 4) each budget's recipe must reach.
TARGETS = {5.0: 25.0, 15.0: 32.0, 60.0: 38.0}
# The minutes table the planner replaced (training/budgets.py until issue 24), as the
# recipe's `--set` overrides: trained beside the plan in the same run as its baseline.
_NARROW = (
    "model.preset=small",
    "model.overrides.num_encoder_layers=4",
    "model.overrides.num_decoder_layers=4",
    "model.overrides.d_model=128",
    "model.overrides.ffn_dim=256",
    "model.overrides.num_heads=4",
    "optimizer.peak_learning_rate=0.005",
    "optimizer.warmup_fraction=0.05",
    "optimizer.label_smoothing=0.1",
    "--vocab-size=8000",
)
_SHORT_BUDGETS = ("model.overrides.dropout=0.1", "data.pipeline.batch_tokens=2048")
MINUTES_TABLE = {
    5.0: (*_NARROW, *_SHORT_BUDGETS, "eval.every_steps=0"),
    15.0: (*_NARROW, *_SHORT_BUDGETS, "eval.every_steps=0"),
    60.0: (
        *_NARROW,
        "model.overrides.dropout=0.3",
        "data.pipeline.batch_tokens=4096",
        "eval.every_steps=1000",
    ),
}


def table_setting(minutes: float) -> tuple[str, ...]:
    """The table's setting for a budget: the largest budget <= minutes (else the smallest)."""
    fitting = [m for m in MINUTES_TABLE if m <= minutes] or [min(MINUTES_TABLE)]
    return MINUTES_TABLE[max(fitting)]


FULL_MINUTES = 60.0  # the published run; decoding and serving measure its model
# The words of the section, filled in by `render`.
TEMPLATE = TEMPLATES / "quality.md"
template_parts, render = bind_template(TEMPLATE)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="directory with the Multi30k files (default: the mirror)")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="recipe work directory (default: a temporary one; a finished run is reused)",
    )
    parser.add_argument(
        "--budgets",
        default=",".join(f"{minutes:g}" for minutes in TARGETS),
        help="training budgets in minutes, comma-separated (default: 5,15,60; short: 0.3)",
    )
    parser.add_argument(
        "--table-budgets",
        default="5,15,60",
        help="budgets also trained with the minutes table the planner replaced, as its "
        "baseline in the same run (default: 5,15,60; '' for none)",
    )
    parser.add_argument(
        "--de-en-budgets",
        default="5,15",
        help="budgets also trained DE->EN (default: 5,15; '' for none)",
    )
    parser.add_argument(
        "--short",
        action="store_true",
        help="quick check: tiny model, 50 test sentences, no greedy run, RESULTS.md untouched",
    )
    args = parser.parse_args(argv)

    def minutes(text: str) -> list[float]:
        return [float(item) for item in text.split(",") if item.strip()]

    if args.short:
        args.budgets, args.table_budgets, args.de_en_budgets = [0.3], [0.3], []
    else:
        args.budgets = minutes(args.budgets)
        args.table_budgets, args.de_en_budgets = (
            minutes(args.table_budgets),
            minutes(args.de_en_budgets),
        )
    return args


@dataclasses.dataclass(frozen=True)
class Variant:
    """What one recipe run of the benchmark trains."""

    minutes: float
    # Multi30k's direction.
    pair: str = "en-de"
    # True: the minutes table's setting (the baseline), not the plan.
    table: bool = False

    @property
    def label(self) -> str:
        """The row's name: `5 min`, `5 min, minutes table`, `5 min, DE->EN`."""
        extra = render("label-table") if self.table else ""
        if self.pair != "en-de":
            extra += render("label-pair", pair=self.pair.upper().replace("-", "->"))
        return render("label", minutes=self.minutes, extra=extra)

    @property
    def suffix(self) -> str:
        """The work directory's suffix beside the 60-minute plan's."""
        return ("-table" if self.table else "") + ("" if self.pair == "en-de" else f"-{self.pair}")


def budget_workdir(workdir: Path, variant: Variant) -> Path:
    """The recipe work directory of one run: `workdir` itself for the 60-minute plan."""
    if variant.minutes == FULL_MINUTES and variant == Variant(FULL_MINUTES):
        return workdir
    return workdir.with_name(f"{workdir.name}-{variant.minutes:g}min{variant.suffix}")


def recipe_command(
    args: argparse.Namespace, workdir: Path, data: Path, variant: Variant
) -> list[str]:
    """The `translator recipe` command line of this benchmark."""
    command = [
        sys.executable,
        "-m",
        "translator",
        "recipe",
        f"--workdir={workdir}",
        f"--minutes={variant.minutes:g}",
        f"--mirror={data}",
        f"--pair={variant.pair}",
    ]
    if variant.table:
        command += [
            item if item.startswith("--") else f"--set={item}"
            for item in table_setting(variant.minutes)
        ]
    if args.short:  # the plumbing, end to end, in about a minute
        command += [
            "--vocab-size=1000",
            "--test-sentences=50",
            "--set=model.preset=tiny",
            "--set=model.overrides={}",  # the tiny preset as it is, whatever the budget's shape
            "--set=eval.max_sentences=50",
            "--set=eval.every_steps=0",
            "--set=checkpoint.every_steps=10",
        ]
    return command


def greedy_bleu(workdir: Path, data: Path, pair: str) -> dict:
    """Scores of the same model's greedy (beam 1) translation of the test set."""
    source, target = pair.split("-")
    with tempfile.TemporaryDirectory(prefix="bench-greedy-") as scratch:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "translator",
                "evaluate",
                f"--model={workdir / 'run'}",
                f"--src={data / f'test_2016_flickr.{source}.gz'}",
                f"--ref={data / f'test_2016_flickr.{target}.gz'}",
                "--beam-size=1",
                f"--report={scratch}",
            ],
            check=True,
        )
        return json.loads((Path(scratch) / "report.json").read_text("utf-8"))


@dataclasses.dataclass
class BudgetRun:
    """One budget's recipe run and its reports."""

    minutes: float
    command: list[str]
    # The beam-4 test report (report.json of `translator evaluate`).
    report: dict
    # The same model's greedy test report (full mode).
    greedy: dict | None
    # (step, greedy validation BLEU) after each validation.
    history: list[tuple[int, float]]
    # Wall minutes of the recipe command (a reused run: seconds).
    wall_minutes: float
    # The run's plan (run/plan.json), or None for a run trained before the planner.
    plan: dict | None = None
    # What the run trained (default: the plan, EN->DE).
    variant: Variant | None = None

    @property
    def label(self) -> str:
        return (self.variant or Variant(self.minutes)).label

    @property
    def planned(self) -> bool:
        """The plan, EN->DE: the rows the targets are about."""
        return (self.variant or Variant(self.minutes)) == Variant(self.minutes)

    @property
    def bleu(self) -> float:
        return self.report["scores"]["bleu"]["score"]

    @property
    def metadata(self) -> dict:
        return self.report["model"]["metadata"]


def run_budget(args: argparse.Namespace, workdir: Path, data: Path, variant: Variant) -> BudgetRun:
    """Runs (or reuses) the recipe of one budget and reads its reports."""
    command = recipe_command(args, workdir, data, variant)
    print(" ".join(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True)
    wall_minutes = (time.perf_counter() - started) / 60
    report = json.loads((workdir / "eval" / "test_2016_flickr" / "report.json").read_text())
    greedy = None if args.short else greedy_bleu(workdir, data, variant.pair)
    history = validation_history(workdir / "run", report["model"]["metadata"])
    scores, metadata = report["scores"], report["model"]["metadata"]
    print(
        f"BLEU {scores['bleu']['score']:.2f}  chrF {scores['chrf']['score']:.2f}  "
        f"TER {scores['ter']['score']:.2f}  BLEU (lowercased) {scores['bleu_lc']['score']:.2f}  "
        f"on {report['sentences']} sentences; model at step {metadata.get('step')}",
        flush=True,
    )
    plan_path = workdir / "run" / "plan.json"
    plan = json.loads(plan_path.read_text("utf-8")) if plan_path.is_file() else None
    return BudgetRun(variant.minutes, command, report, greedy, history, wall_minutes, plan, variant)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = find_data(args.data)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as scratch:
        base = args.workdir or Path(scratch) / "recipe"
        variants = [Variant(minutes) for minutes in args.budgets]
        variants += [Variant(minutes, table=True) for minutes in args.table_budgets]
        variants += [Variant(minutes, pair="de-en") for minutes in args.de_en_budgets]
        for variant in variants:
            runs.append(run_budget(args, budget_workdir(base, variant), data, variant))
    if args.short:
        return 0  # a tiny model trained for seconds: no figure to publish
    for run in runs:
        goal = TARGETS.get(run.minutes)
        if goal is not None and run.planned:
            report_target(
                f"test_2016_flickr BLEU, beam 4, {run.minutes:g}-minute recipe",
                run.bleu,
                goal,
                "BLEU",
            )
    for run, table in plan_and_table(runs):
        report_target(
            f"test_2016_flickr BLEU, beam 4, {run.minutes:g}-minute plan minus the minutes table",
            run.bleu - table.bleu,
            0.0,
            "BLEU",
        )
    update_section("quality", quality_markdown(runs))
    return 0


def plan_and_table(runs: list[BudgetRun]) -> list[tuple[BudgetRun, BudgetRun]]:
    """(plan, minutes table) run pairs of the same budget, EN->DE."""
    tables = {run.minutes: run for run in runs if run.variant and run.variant.table}
    return [(run, tables[run.minutes]) for run in runs if run.planned and run.minutes in tables]


def quality_markdown(runs: list[BudgetRun]) -> str:
    """The RESULTS.md section: one row per budget, then the longest run in detail."""
    longest = max((run for run in runs if run.planned), key=lambda run: run.minutes)
    scores, search = longest.report["scores"], longest.report["search"]
    missed = [
        run
        for run in runs
        if run.planned and TARGETS.get(run.minutes) and run.bleu < TARGETS[run.minutes]
    ]
    section = render(
        "section",
        beam_size=search.get("beam_size"),
        sentences=longest.report["sentences"],
        signature=scores["bleu"]["signature"],
        rows="\n".join(budget_row(run) for run in runs),
        chosen_by=chosen_by(runs),
        longest=longest.minutes,
        curve=_curve(longest.history),
        search=json.dumps(search),
        length_ratio=longest.report["length"]["ratio"],
        why_missed="".join(gap_analysis(run) + "\n" for run in missed),
        command=command_line(),
        commands="; ".join(
            render("command-run", command=" ".join(run.command[2:]), wall_minutes=run.wall_minutes)
            for run in runs
        ),
        date=today(),
        machine=machine_summary(),
    )
    return section + "\n"


def budget_row(run: BudgetRun) -> str:
    """The table row of one budget: its test scores, target, updates and setting."""
    scores, metadata = run.report["scores"], run.metadata
    goal = TARGETS.get(run.minutes) if run.planned else None
    greedy = run.greedy["scores"]["bleu"]["score"] if run.greedy else None
    return render(
        "budget-row",
        label=run.label,
        bleu=run.bleu,
        goal="" if goal is None else render("goal", goal=goal),
        verdict="" if goal is None else ("meets" if run.bleu >= goal else "misses"),
        chrf=scores["chrf"]["score"],
        ter=scores["ter"]["score"],
        greedy_bleu=_rounded(greedy),
        validation_bleu=_rounded(metadata.get("best_validation_bleu")),
        updates=metadata.get("step", 0),
        target_tokens=_tokens(metadata.get("target_tokens")),
        setting=_setting(metadata.get("config", {})),
    )


def chosen_by(runs: list[BudgetRun]) -> str:
    """A bullet per budget: what the planner chose for it and why (its rule's reasons)."""
    from training.plan import Plan

    bullets = []
    for run in runs:
        if run.variant and run.variant.table:
            setting, reasons = _setting(run.metadata.get("config", {})), render("table-reason")
        elif run.plan is None:
            setting, reasons = _setting(run.metadata.get("config", {})), "a setting set by hand"
        else:
            plan = Plan.from_json(json.dumps(run.plan))
            setting = "; ".join(f"{c.key} = {c.value}" for c in plan.choices)
            reasons = "the planner (training/plan.py): " + "; ".join(
                f"{c.key}: {c.reason}" for c in plan.choices
            )
        bullets.append(render("chosen-by", label=run.label, setting=setting, chosen_by=reasons))
    return "\n".join(bullets)


def _tokens(count: int | None) -> str:
    return render("not-available") if count is None else render("tokens", millions=count / 1e6)


def _setting(config: dict) -> str:
    model, optimizer = config.get("model", {}), config.get("optimizer", {})
    overrides = model.get("overrides", {})
    shape = ", ".join(
        render("setting-override", key=key, value=value) for key, value in overrides.items()
    )
    rate = (
        render("rate-budgeted", peak=optimizer.get("peak_learning_rate"))
        if optimizer.get("schedule") == "budgeted"
        else render("rate-inverse-sqrt", warmup=optimizer.get("warmup_steps"))
    )
    return render("setting", preset=model.get("preset", "?"), shape=shape, rate=rate)


def _curve(history: list[tuple[int, float]]) -> str:
    points = [render("curve-point", bleu=value, step=step) for step, value in history]
    return ", ".join(points) or render("curve-not-recorded")


def validation_history(run_dir: Path, metadata: dict) -> list[tuple[int, float]]:
    """(step, greedy validation BLEU) after each validation of the run, in order.

    From the model's metadata; runs older than that field have it only in their
    TensorBoard logs (`val_bleu`, logged once per validation period), where the step of
    the i-th validation is (i + 1) x eval.every_steps, the last one the final step.
    """
    if "validation_bleu" in metadata:
        return [(int(step), float(bleu)) for step, bleu in metadata["validation_bleu"]]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    logs = EventAccumulator(str(run_dir / "logs" / "validation"), size_guidance={"tensors": 0})
    logs.Reload()
    if "epoch_bleu" not in logs.Tags().get("tensors", []):
        return []
    every = metadata.get("config", {}).get("eval", {}).get("every_steps") or 0
    last = int(metadata.get("step") or 0)
    return [
        (min((event.step + 1) * every, last), float(make_ndarray(event.tensor_proto)))
        for event in logs.Tensors("epoch_bleu")
    ]


def gap_analysis(run: BudgetRun) -> str:
    """The bullet on what the validation curve says about a missed target."""
    goal, history, metadata = TARGETS[run.minutes], run.history, run.metadata
    if len(history) < 2:
        trend = "trend-validated-once"
    elif history[-1][1] > history[-2][1] + 0.5:
        trend = "trend-rising"
    else:
        trend = "trend-flat"
    return render(
        "why-misses",
        minutes=run.minutes,
        gap=goal - run.bleu,
        updates=metadata.get("step", 0),
        curve=_curve(history),
        trend=render(trend),
    )


def _rounded(value: float | None) -> str:
    return render("not-available") if value is None else render("score", value=value)


if __name__ == "__main__":
    sys.exit(main())
