"""Time to quality: the recipe's 5-, 15- and 60-minute models on Multi30k test_2016_flickr.
The 60-minute plan works in --workdir, the others beside it (WORKDIR-5min, ...)."""

import dataclasses
import json
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from bench import harness
from training.config import CheckpointSection
from training.planning.measure import PLAN_FILE
from training.planning.rules import Plan
from training.record import RunRecord
from translator.constants import DEFAULT_LABEL_SMOOTHING

render = harness.Template("quality")
# Test BLEU (cased sacreBLEU, beam 4) each budget's recipe must reach.
TARGETS = {5.0: 25.0, 15.0: 32.0, 60.0: 38.0}
FULL_MINUTES = 60.0  # the published run; decoding and serving measure its model
DE_EN_MINUTES = (5.0, 15.0)
# The minutes table the planner replaced (training/budgets.py until issue 24), as the
# recipe's `--set` overrides: trained beside the plan in the same run as its baseline.
_SHAPE = dict(num_encoder_layers=4, num_decoder_layers=4, d_model=128, ffn_dim=256, num_heads=4)
_OPTIMIZER = dict(
    peak_learning_rate=0.005, warmup_fraction=0.05, label_smoothing=DEFAULT_LABEL_SMOOTHING
)
_NARROW = ("model.preset=small", *(f"model.overrides.{k}={v}" for k, v in _SHAPE.items()))
_NARROW += (*(f"optimizer.{k}={v}" for k, v in _OPTIMIZER.items()), "--vocab-size=8000")
_NARROW += ("data.pipeline.subword_nbest=0",)  # the table had no subword sampling
_NARROW += (f"checkpoint.every_steps={CheckpointSection.every_steps}",)  # the config's cadence
_SHORT = (*_NARROW, "model.overrides.dropout=0.1", "data.pipeline.batch_tokens=2048")
_LONG = (*_NARROW, "model.overrides.dropout=0.3", "data.pipeline.batch_tokens=4096")
MINUTES_TABLE = {
    5.0: (*_SHORT, "eval.every_steps=0"),
    15.0: (*_SHORT, "eval.every_steps=0"),
    60.0: (*_LONG, "eval.every_steps=1000"),
}
# The short mode: the plumbing, end to end, in about a minute (tiny as it is).
SHORT_RECIPE = ("--vocab-size=1000", "--test-sentences=50", "--set=model.preset=tiny")
SHORT_RECIPE += ("--set=model.overrides={}", "--set=eval.max_sentences=50")
SHORT_RECIPE += ("--set=eval.every_steps=0", "--set=checkpoint.every_steps=10")


def table_setting(minutes: float) -> tuple[str, ...]:
    """The table's setting for a budget: the largest budget <= minutes (else the smallest)."""
    return MINUTES_TABLE[max([m for m in MINUTES_TABLE if m <= minutes] or [min(MINUTES_TABLE)])]


@dataclasses.dataclass(frozen=True)
class Variant:
    """What one recipe run trains: a budget, Multi30k's direction, the plan or the table."""

    minutes: float
    pair: str = "en-de"
    table: bool = False

    @property
    def label(self) -> str:
        extra = render("label-table") if self.table else ""
        if self.pair != "en-de":
            extra += render("label-pair", pair=self.pair.upper().replace("-", "->"))
        return render("label", minutes=self.minutes, extra=extra)

    def workdir(self, base: Path) -> Path:
        """The recipe work directory of this run: `base` itself for the 60-minute plan."""
        if self == Variant(FULL_MINUTES):
            return base
        suffix = "-table" * self.table + f"-{self.pair}" * (self.pair != "en-de")
        return base.with_name(f"{base.name}-{self.minutes:g}min{suffix}")


def recipe_command(args, workdir: Path, data: Path, variant: Variant) -> list[str]:
    command = ["recipe", f"--workdir={workdir}", f"--mirror={data}"]
    command += [f"--minutes={variant.minutes:g}", f"--pair={variant.pair}"]
    if variant.table:
        setting = table_setting(variant.minutes)
        command += [item if item.startswith("--") else f"--set={item}" for item in setting]
    return command + list(SHORT_RECIPE if args.short else ())


@dataclasses.dataclass
class BudgetRun:
    """One recipe run: its beam-4 test report.json, the greedy one (full mode), (step, greedy
    validation BLEU) a validation, its wall minutes, run/plan.json (None: before the planner)."""

    minutes: float
    command: list[str]
    report: dict
    greedy: dict | None
    history: list[tuple[int, float]]
    wall_minutes: float
    plan: dict | None = None
    variant: Variant | None = None  # default: the plan, EN->DE

    label = property(lambda self: (self.variant or Variant(self.minutes)).label)
    # The plan, EN->DE: the rows the targets are about.
    planned = property(lambda self: self.variant in (None, Variant(self.minutes)))
    bleu = property(lambda self: self.report["scores"]["bleu"]["score"])
    metadata = property(lambda self: RunRecord.from_dict(self.report["model"]["metadata"]))


def run_budget(args, base: Path, data: Path, variant: Variant) -> BudgetRun:
    workdir, started = variant.workdir(base), time.perf_counter()
    command = recipe_command(args, workdir, data, variant)
    harness.run_translator(*command)
    wall_minutes = (time.perf_counter() - started) / 60
    report = json.loads((workdir / "eval" / "test_2016_flickr" / "report.json").read_text())
    greedy = None
    if not args.short:  # the same model's greedy (beam 1) translation of the test set
        source, target = variant.pair.split("-")
        with tempfile.TemporaryDirectory(prefix="bench-greedy-") as scratch:
            files = [f"--src={data / f'test_2016_flickr.{source}.gz'}"]
            files += [f"--ref={data / f'test_2016_flickr.{target}.gz'}"]
            options = [f"--model={workdir / 'run'}", "--beam-size=1", f"--report={scratch}"]
            harness.run_translator("evaluate", *options, *files)
            greedy = json.loads((Path(scratch) / "report.json").read_text("utf-8"))
    history = list(RunRecord.from_dict(report["model"]["metadata"]).validation_bleu)
    scores = " ".join(f"{name} {score['score']:.2f}" for name, score in report["scores"].items())
    bleu = report["scores"]["bleu"]["score"]
    print(f"BLEU {bleu:.2f} ({scores}) on {report['sentences']} sentences", flush=True)
    plan_path = workdir / "run" / PLAN_FILE
    plan = json.loads(plan_path.read_text("utf-8")) if plan_path.is_file() else None
    command = ["python", "-m", "translator", *command]
    return BudgetRun(variant.minutes, command, report, greedy, history, wall_minutes, plan, variant)


def plan_and_table(runs: list[BudgetRun]) -> list[tuple[BudgetRun, BudgetRun]]:
    tables = {run.minutes: run for run in runs if run.variant and run.variant.table}
    return [(run, tables[run.minutes]) for run in runs if run.planned and run.minutes in tables]


def quality_markdown(runs: list[BudgetRun]) -> str:
    """The section (its local names): one row per budget, then the longest run in detail."""
    longest = max((run for run in runs if run.planned), key=lambda run: run.minutes)
    missed = [r for r in runs if r.planned and r.bleu < TARGETS.get(r.minutes, 0)]
    rows, chosen = "\n".join(map(budget_row, runs)), "\n".join(map(chosen_by, runs))
    longest_curve, search = curve(longest.history), json.dumps(longest.report["search"])
    why_missed = "".join(gap_analysis(run) + "\n" for run in missed)
    commands = "; ".join(
        render("command-run", command=" ".join(run.command[2:]), wall_minutes=run.wall_minutes)
        for run in runs
    )
    return render("section", **harness.footer(), **locals(), report=longest.report)


def budget_row(run: BudgetRun) -> str:
    """The table row of one budget (its local names): test scores, target, updates, setting."""
    metadata, goal = run.metadata, TARGETS.get(run.minutes) if run.planned else None
    tokens, scores = metadata.target_tokens or None, run.report["scores"]
    verdict = "" if goal is None else ("meets" if run.bleu >= goal else "misses")
    goal = "" if goal is None else render("goal", goal=goal)
    greedy_bleu = score(run.greedy and run.greedy["scores"]["bleu"]["score"])
    validation_bleu, updates = score(metadata.best_validation_bleu), metadata.step
    target_tokens = score(tokens) if tokens is None else render("tokens", millions=tokens / 1e6)
    setting = setting_text(metadata.config)
    return render("budget-row", label=run.label, **locals())


def chosen_by(run: BudgetRun) -> str:
    """The bullet of a budget: what the planner chose for it and why (its rule's reasons)."""
    chosen = setting_text(run.metadata.config)
    if run.variant and run.variant.table:
        reasons = render("table-reason")
    elif run.plan is None:
        reasons = render("by-hand")
    else:
        choices = Plan.from_json(json.dumps(run.plan)).choices
        chosen = "; ".join(f"{c.key} = {c.value}" for c in choices)
        reasons = "; ".join(f"{c.key}: {c.reason}" for c in choices)
        reasons = f"the planner (training/planning/rules.py): {reasons}"
    return render("chosen-by", label=run.label, setting=chosen, chosen_by=reasons)


def setting_text(config: Mapping) -> str:
    """A run's setting, from its config: preset, shape overrides, learning rate schedule."""
    model, optimizer = config.get("model", {}), config.get("optimizer", {})
    shape = ", ".join(f"{key} {value}" for key, value in model.get("overrides", {}).items())
    if optimizer.get("schedule") == "budgeted":
        rate = render("rate-budgeted", peak=optimizer.get("peak_learning_rate"))
    else:
        rate = render("rate-inverse-sqrt", warmup=optimizer.get("warmup_steps"))
    return render("setting", preset=model.get("preset", "?"), shape=shape, rate=rate)


def curve(history: list[tuple[int, float]]) -> str:
    points = [render("curve-point", bleu=value, step=step) for step, value in history]
    return ", ".join(points) or render("curve-not-recorded")


def score(value: float | None) -> str:
    return render("not-available") if value is None else f"{value:.2f}"


def gap_analysis(run: BudgetRun) -> str:
    """The bullet on what the validation curve says about a missed target."""
    history, gap = run.history, TARGETS[run.minutes] - run.bleu
    if len(history) < 2:
        trend = render("trend-validated-once")
    else:
        trend = render("trend-rising" if history[-1][1] > history[-2][1] + 0.5 else "trend-flat")
    figures = dict(minutes=run.minutes, updates=run.metadata.step, curve=curve(history))
    return render("why-misses", **figures, gap=gap, trend=trend)


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("quality", __doc__)
    parser.add_argument("--workdir", type=Path, help="recipe work directory (a temporary one)")
    parser.add_argument("--budgets", help="training budgets in minutes (5,15,60; short: 0.3)")
    args = harness.parse(parser, argv, budgets=("5,15,60", "0.3"))
    args.budgets = [float(m) for m in args.budgets.split(",") if m.strip()]
    data = harness.find_data(args.data)
    variants = [Variant(minutes) for minutes in args.budgets]
    # (The minutes table's baselines only in full mode: in short mode they would train
    # the same plumbing again.)
    variants += [Variant(minutes, table=True) for minutes in args.budgets if not args.short]
    de_en = () if args.short else DE_EN_MINUTES
    variants += [Variant(minutes, pair="de-en") for minutes in args.budgets if minutes in de_en]
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as scratch:
        base = args.workdir or Path(scratch) / "recipe"
        runs = [run_budget(args, base, data, variant) for variant in variants]
    if args.short:  # a tiny model trained for seconds: its section composed, not published
        print(f"(the section: {len(quality_markdown(runs).splitlines())} lines, not written)")
        return 0
    for run in runs:
        if run.planned and (goal := TARGETS.get(run.minutes)) is not None:
            name = f"test_2016_flickr BLEU, beam 4, {run.minutes:g}-minute recipe"
            harness.report_target(name, run.bleu, goal, "BLEU")
    for run, table in plan_and_table(runs):
        name = f"test_2016_flickr BLEU, beam 4, {run.minutes:g}-minute plan minus the minutes table"
        harness.report_target(name, run.bleu - table.bleu, 0.0, "BLEU")
    return harness.publish(args, "quality", quality_markdown, runs)
