"""Time to quality: the recipe's 5-, 15- and 60-minute models on Multi30k test_2016_flickr.

    python -m bench.quality [--workdir runs/m30k] [--budgets 5] [--short]

Full mode runs `translator recipe --minutes M` for each budget (the plan `training/plan.py`
makes for it here, M minutes of training, beam-4 test BLEU), beside the minutes table the
planner replaced (`--table-budgets`) and DE->EN (`--de-en-budgets`), and reports per budget
test BLEU, chrF, TER, updates, tokens, and the 60-minute run's validation curve. The
60-minute recipe works in `--workdir`, the others beside it (`WORKDIR-5min`, ...); a
finished run there is reported on as it is, so the hours are not spent twice.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import harness

render = harness.Template("quality")
# Test BLEU (cased sacreBLEU, beam 4) each budget's recipe must reach.
TARGETS = {5.0: 25.0, 15.0: 32.0, 60.0: 38.0}
FULL_MINUTES = 60.0  # the published run; decoding and serving measure its model
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
_SHORT = (*_NARROW, "model.overrides.dropout=0.1", "data.pipeline.batch_tokens=2048")
MINUTES_TABLE = {
    5.0: (*_SHORT, "eval.every_steps=0"),
    15.0: (*_SHORT, "eval.every_steps=0"),
    60.0: (
        *_NARROW,
        "model.overrides.dropout=0.3",
        "data.pipeline.batch_tokens=4096",
        "eval.every_steps=1000",
    ),
}


def table_setting(minutes: float) -> tuple[str, ...]:
    """The table's setting for a budget: the largest budget <= minutes (else the smallest)."""
    return MINUTES_TABLE[max([m for m in MINUTES_TABLE if m <= minutes] or [min(MINUTES_TABLE)])]


def parse_args(argv: list[str] | None):
    parser = harness.make_parser("quality", __doc__)
    parser.add_argument("--workdir", type=Path, help="recipe work directory (a temporary one)")
    parser.add_argument("--budgets", help="training budgets in minutes (5,15,60; short: 0.3)")
    parser.add_argument("--table-budgets", help="also with the minutes table (5,15,60)")
    parser.add_argument("--de-en-budgets", help="also trained DE->EN (5,15; '' for none)")
    defaults = dict(budgets=("5,15,60", "0.3"), table_budgets=("5,15,60", "0.3"))
    args = harness.parse(parser, argv, de_en_budgets=("5,15", ""), **defaults)
    for name in ("budgets", "table_budgets", "de_en_budgets"):
        setattr(args, name, [float(m) for m in getattr(args, name).split(",") if m.strip()])
    return args


@dataclasses.dataclass(frozen=True)
class Variant:
    """What one recipe run trains: a budget, Multi30k's direction, the plan or the table."""

    minutes: float
    pair: str = "en-de"
    table: bool = False

    @property
    def label(self) -> str:
        """The row's name: `5 min`, `5 min, minutes table`, `5 min, DE->EN`."""
        extra = render("label-table") if self.table else ""
        if self.pair != "en-de":
            extra += render("label-pair", pair=self.pair.upper().replace("-", "->"))
        return render("label", minutes=self.minutes, extra=extra)

    suffix = property(lambda self: "-table" * self.table + f"-{self.pair}" * (self.pair != "en-de"))


def budget_workdir(workdir: Path, variant: Variant) -> Path:
    """The recipe work directory of one run: `workdir` itself for the 60-minute plan."""
    if variant == Variant(FULL_MINUTES):
        return workdir
    return workdir.with_name(f"{workdir.name}-{variant.minutes:g}min{variant.suffix}")


def recipe_command(args, workdir: Path, data: Path, variant: Variant) -> list[str]:
    """The `translator recipe` command line of one run."""
    command = harness.translator_command("recipe", f"--workdir={workdir}", f"--mirror={data}")
    command += [f"--minutes={variant.minutes:g}", f"--pair={variant.pair}"]
    if variant.table:
        setting = table_setting(variant.minutes)
        command += [item if item.startswith("--") else f"--set={item}" for item in setting]
    if args.short:  # the plumbing, end to end, in about a minute
        command += ["--vocab-size=1000", "--test-sentences=50", "--set=model.preset=tiny"]
        command += ["--set=model.overrides={}", "--set=eval.max_sentences=50"]  # tiny as it is
        command += ["--set=eval.every_steps=0", "--set=checkpoint.every_steps=10"]
    return command


def greedy_bleu(workdir: Path, data: Path, pair: str) -> dict:
    """The report of the same model's greedy (beam 1) translation of the test set."""
    source, target = pair.split("-")
    with tempfile.TemporaryDirectory(prefix="bench-greedy-") as scratch:
        files = [f"--src={data / f'test_2016_flickr.{source}.gz'}"]
        files += [f"--ref={data / f'test_2016_flickr.{target}.gz'}"]
        options = [f"--model={workdir / 'run'}", *files, "--beam-size=1", f"--report={scratch}"]
        subprocess.run(harness.translator_command("evaluate", *options), check=True)
        return json.loads((Path(scratch) / "report.json").read_text("utf-8"))


@dataclasses.dataclass
class BudgetRun:
    """One budget's recipe run and its reports."""

    minutes: float
    command: list[str]
    report: dict  # the beam-4 test report (report.json of `translator evaluate`)
    greedy: dict | None  # the greedy test report (full mode)
    history: list[tuple[int, float]]  # (step, greedy validation BLEU) after each validation
    wall_minutes: float  # of the recipe command (a reused run: seconds)
    plan: dict | None = None  # run/plan.json, None for a run trained before the planner
    variant: Variant | None = None  # default: the plan, EN->DE

    label = property(lambda self: (self.variant or Variant(self.minutes)).label)
    # The plan, EN->DE: the rows the targets are about.
    planned = property(
        lambda self: (self.variant or Variant(self.minutes)) == Variant(self.minutes)
    )
    bleu = property(lambda self: self.report["scores"]["bleu"]["score"])
    metadata = property(lambda self: self.report["model"]["metadata"])


def run_budget(args, workdir: Path, data: Path, variant: Variant) -> BudgetRun:
    """Runs (or reuses) the recipe of one budget and reads its reports."""
    command = recipe_command(args, workdir, data, variant)
    print(" ".join(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True)
    wall_minutes = (time.perf_counter() - started) / 60
    report = json.loads((workdir / "eval" / "test_2016_flickr" / "report.json").read_text())
    greedy = None if args.short else greedy_bleu(workdir, data, variant.pair)
    history = validation_history(workdir / "run", report["model"]["metadata"])
    scores = {name: score["score"] for name, score in report["scores"].items()}
    print(
        f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  TER {scores['ter']:.2f}  "
        f"BLEU (lowercased) {scores['bleu_lc']:.2f}  on {report['sentences']} sentences",
        flush=True,
    )
    plan_path = workdir / "run" / "plan.json"
    plan = json.loads(plan_path.read_text("utf-8")) if plan_path.is_file() else None
    return BudgetRun(variant.minutes, command, report, greedy, history, wall_minutes, plan, variant)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = harness.find_data(args.data)
    variants = [Variant(minutes) for minutes in args.budgets]
    variants += [Variant(minutes, table=True) for minutes in args.table_budgets]
    variants += [Variant(minutes, pair="de-en") for minutes in args.de_en_budgets]
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as scratch:
        base = args.workdir or Path(scratch) / "recipe"
        runs = [run_budget(args, budget_workdir(base, v), data, v) for v in variants]
    if args.short:
        return 0  # a tiny model trained for seconds: no figure to publish
    for run in runs:
        if run.planned and (goal := TARGETS.get(run.minutes)) is not None:
            name = f"test_2016_flickr BLEU, beam 4, {run.minutes:g}-minute recipe"
            harness.report_target(name, run.bleu, goal, "BLEU")
    for run, table in plan_and_table(runs):
        name = f"test_2016_flickr BLEU, beam 4, {run.minutes:g}-minute plan minus the minutes table"
        harness.report_target(name, run.bleu - table.bleu, 0.0, "BLEU")
    harness.publish(args, "quality", quality_markdown, runs)
    return 0


def plan_and_table(runs: list[BudgetRun]) -> list[tuple[BudgetRun, BudgetRun]]:
    """(plan, minutes table) run pairs of the same budget, EN->DE."""
    tables = {run.minutes: run for run in runs if run.variant and run.variant.table}
    return [(run, tables[run.minutes]) for run in runs if run.planned and run.minutes in tables]


def quality_markdown(runs: list[BudgetRun]) -> str:
    """The section: one row per budget, then the longest run in detail."""
    longest = max((run for run in runs if run.planned), key=lambda run: run.minutes)
    missed = [r for r in runs if r.planned and r.bleu < TARGETS.get(r.minutes, 0)]
    commands = "; ".join(
        render("command-run", command=" ".join(run.command[2:]), wall_minutes=run.wall_minutes)
        for run in runs
    )
    return (
        render(
            "section",
            **harness.footer(),
            report=longest.report,
            rows="\n".join(budget_row(run) for run in runs),
            chosen_by="\n".join(chosen_by(run) for run in runs),
            longest=longest.minutes,
            curve=curve(longest.history),
            search=json.dumps(longest.report["search"]),
            why_missed="".join(gap_analysis(run) + "\n" for run in missed),
            commands=commands,
        )
        + "\n"
    )


def budget_row(run: BudgetRun) -> str:
    """The table row of one budget: its test scores, target, updates and setting."""
    metadata, goal = run.metadata, TARGETS.get(run.minutes) if run.planned else None
    greedy = run.greedy["scores"]["bleu"]["score"] if run.greedy else None
    tokens = metadata.get("target_tokens")
    return render(
        "budget-row",
        label=run.label,
        scores=run.report["scores"],
        goal="" if goal is None else render("goal", goal=goal),
        verdict="" if goal is None else ("meets" if run.bleu >= goal else "misses"),
        greedy_bleu=score(greedy),
        validation_bleu=score(metadata.get("best_validation_bleu")),
        updates=metadata.get("step", 0),
        target_tokens=score(tokens) if tokens is None else render("tokens", millions=tokens / 1e6),
        setting=setting(metadata.get("config", {})),
    )


def chosen_by(run: BudgetRun) -> str:
    """The bullet of a budget: what the planner chose for it and why (its rule's reasons)."""
    from training.plan import Plan

    if run.variant and run.variant.table:
        chosen, reasons = setting(run.metadata.get("config", {})), render("table-reason")
    elif run.plan is None:
        chosen, reasons = setting(run.metadata.get("config", {})), "a setting set by hand"
    else:
        choices = Plan.from_json(json.dumps(run.plan)).choices
        chosen = "; ".join(f"{c.key} = {c.value}" for c in choices)
        reasons = "the planner (training/plan.py): " + "; ".join(
            f"{c.key}: {c.reason}" for c in choices
        )
    return render("chosen-by", label=run.label, setting=chosen, chosen_by=reasons)


def setting(config: dict) -> str:
    """A run's setting, from its config: preset, shape overrides, learning rate schedule."""
    model, optimizer = config.get("model", {}), config.get("optimizer", {})
    shape = ", ".join(f"{key} {value}" for key, value in model.get("overrides", {}).items())
    if optimizer.get("schedule") == "budgeted":
        rate = render("rate-budgeted", peak=optimizer.get("peak_learning_rate"))
    else:
        rate = render("rate-inverse-sqrt", warmup=optimizer.get("warmup_steps"))
    return render("setting", preset=model.get("preset", "?"), shape=shape, rate=rate)


def curve(history: list[tuple[int, float]]) -> str:
    """The validation curve: BLEU at each step."""
    points = [render("curve-point", bleu=value, step=step) for step, value in history]
    return ", ".join(points) or render("curve-not-recorded")


def score(value: float | None) -> str:
    return render("not-available") if value is None else f"{value:.2f}"


def validation_history(run_dir: Path, metadata: dict) -> list[tuple[int, float]]:
    """(step, greedy validation BLEU) after each validation of the run, in order.

    From the model's metadata; older runs have it only in their TensorBoard logs, where
    the i-th validation's step is (i + 1) x eval.every_steps, the last the final step.
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
    history = run.history
    if len(history) < 2:
        trend = "trend-validated-once"
    else:
        trend = "trend-rising" if history[-1][1] > history[-2][1] + 0.5 else "trend-flat"
    gap, updates = TARGETS[run.minutes] - run.bleu, run.metadata.get("step", 0)
    return render(
        "why-misses",
        minutes=run.minutes,
        gap=gap,
        updates=updates,
        curve=curve(history),
        trend=render(trend),
    )


if __name__ == "__main__":
    sys.exit(main())
