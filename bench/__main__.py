"""Every benchmark, one command: `python -m bench [--short] [--only NAMES]`.

    python -m bench                    # full: rewrites every section of bench/RESULTS.md
    python -m bench --short            # quick check of every benchmark; writes nothing
    python -m bench --only decoding,serving
    python -m bench --workdir runs/m30k   # reuse a finished recipe run (no hour of training)

The full run trains OpenNMT-tf beside `translator train` (`bench.peers`, the peer in its
own virtual environment), trains the budget planner's trial grid (`bench.planner`: its
plans beside variants on Multi30k subsets, both directions, 2- and 5-minute budgets, about
two hours), trains the recipe for 5, 15 and 60 minutes (`bench.quality`, the
60-minute one in `--workdir`, default runs/bench-recipe, the others beside it; a finished
run is reported on, not trained again), then measures decoding (ours, then ours against
CTranslate2 on the same model: `bench.engines`) and serving on the
60-minute model: the published figures are those of the model a user gets. Decoding is
also measured on random weights of the same shape before that (the shape the peers were
measured on). Short mode uses tiny random models throughout.

Each benchmark runs as its own process (`python -m bench.<name>`), so TensorFlow state
(dtype policies, threads, compiled functions) never leaks from one into the next, and its
output is shown as it comes. Benchmarks announce each target they measure with a
`bench-target:` line (`bench.results.report_target`); the full run gathers them into the
summary section at the top of RESULTS.md, with the command, the date and the machine.
The exit code is 1 if a benchmark failed (a missed target is a figure, not a failure).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/__main__.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import (
    command_line,
    machine_summary,
    parse_targets,
    read_section,
    today,
    update_section,
)

BENCHMARKS = (
    "pipeline",
    "training",
    "peers",
    "planner",
    "decoding",
    "serving",
    "quality",
    "engines",
)
# In the order they run: the cheap ones first, then the hour of training, then what
# needs its model. (benchmark, whether it runs on the recipe's trained model in full mode)
STAGES = (
    ("pipeline", False),
    ("training", False),
    ("peers", False),
    ("planner", False),
    ("decoding", False),
    ("quality", False),
    ("decoding", True),
    ("engines", True),
    ("serving", True),
)
DEFAULT_WORKDIR = Path("runs/bench-recipe")


@dataclasses.dataclass
class Outcome:
    """What one benchmark process did."""

    name: str
    # The process' exit code.
    returncode: int
    # Wall time of the process, seconds.
    seconds: float
    # Its `bench-target:` records.
    targets: list[dict]


def run_benchmark(name: str, arguments: list[str], label: str | None = None) -> Outcome:
    """Runs `python -m bench.<name> ARGUMENTS`, echoing its output as it comes."""
    command = [sys.executable, "-m", f"bench.{name}", *arguments]
    name = label or name
    print(f"\n=== bench.{name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    lines = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    seconds = time.perf_counter() - started
    print(f"=== bench.{name}: exit {process.returncode} after {seconds:.0f} s", flush=True)
    return Outcome(name, process.returncode, seconds, parse_targets("".join(lines)))


def summary_table(outcomes: list[Outcome]) -> str:
    """The markdown table of every target, one row each."""
    rows = [
        "| benchmark | target | measured | goal | met |",
        "|---|---|---|---|---|",
    ]
    for outcome in outcomes:
        if outcome.returncode != 0:
            rows.append(f"| {outcome.name} | (failed: exit {outcome.returncode}) | | | no |")
        for target in outcome.targets:
            sign = ">=" if target.get("higher_is_better", True) else "<="
            rows.append(
                f"| {outcome.name} | {target['name']} | {_figure(target['measured'])} "
                f"{target['unit']} | {sign} {_figure(target['goal'])} {target['unit']} | "
                f"{'**yes**' if target['met'] else '**no**'} |"
            )
    return "\n".join(rows)


# The summary records, per benchmark row label, the run its rows come from, so that a
# partial run (`--only`) keeps each kept row's own origin, not the previous run's.
PROVENANCE = re.compile(r"^<!-- provenance: (.*) -->$", re.MULTILINE)


def kept_rows(previous: str | None, ran: set[str]) -> tuple[list[str], dict[str, str]]:
    """The rows of the previous summary for benchmarks this run did not run, and their origins.

    `python -m bench --only NAMES` measures some benchmarks: the others' rows stay in the
    summary (the summary then says which rows come from which run) instead of vanishing.

    Returns:
        `(rows, origins)`: the kept table rows, and {row label: the run it comes from},
        read from the previous summary's provenance record (a summary without one: its
        start line, for every row).
    """
    if not previous:
        return [], {}
    started = re.search(r"^- Started: (.+)$", previous, re.MULTILINE)
    record = PROVENANCE.search(previous)
    recorded = json.loads(record.group(1)) if record else {}
    rows = [
        line
        for line in previous.splitlines()
        if line.startswith("| ")
        and not line.startswith("| benchmark |")
        and line.split("|")[1].strip().split(" (")[0] not in ran
    ]
    labels = dict.fromkeys(row.split("|")[1].strip() for row in rows)
    fallback = started.group(1) if started else "an earlier run"
    return rows, {label: recorded.get(label, fallback) for label in labels}


def kept_note(origins: dict[str, str]) -> str:
    """The summary's line naming, per origin, the rows kept from it ('' if none)."""
    by_origin: dict[str, list[str]] = {}
    for label, origin in origins.items():
        by_origin.setdefault(origin, []).append(label)
    parts = [
        f"the {', '.join(sorted(labels))} rows from the run started {origin}"
        for origin, labels in by_origin.items()
    ]
    return f"\n- Kept, not run this time: {'; '.join(parts)}." if parts else ""


def _figure(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def finished_model(workdir: Path) -> Path:
    """The metadata file a finished recipe run in `workdir` has (its final model's)."""
    return workdir / "run" / "model" / "metadata.json"


def reuse_note(workdir: Path) -> str:
    """What the summary says when quality reported on an earlier recipe run."""
    path = finished_model(workdir)
    metadata = json.loads(path.read_text("utf-8"))
    saved = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
    return (
        f"\n- Quality reports on the recipe run already finished in `{workdir}` (its model "
        f"saved {saved:%Y-%m-%d %H:%M UTC}, "
        f"{metadata.get('training_seconds', 0) / 60:.0f} minutes of training), so that hour "
        "is not in the timings above; decoding and serving (trained model) use that model."
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Runs every benchmark and (in full mode) rewrites bench/RESULTS.md.",
    )
    parser.add_argument(
        "--short",
        action="store_true",
        help="quick check of each benchmark (small sizes); RESULTS.md is not written",
    )
    parser.add_argument(
        "--only",
        default=",".join(BENCHMARKS),
        help=f"comma-separated subset of: {', '.join(BENCHMARKS)} (default: all)",
    )
    parser.add_argument("--data", help="directory with the Multi30k files (default: the mirror)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help=(
            "full mode: the recipe work directory that quality trains in (or reports on, if "
            f"finished) and whose model decoding and serving use (default: {DEFAULT_WORKDIR})"
        ),
    )
    parser.add_argument(
        "--budgets",
        help="full mode: the recipe budgets bench.quality trains, in minutes (default: 5,15,60)",
    )
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(args.only) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {BENCHMARKS}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Runs the selected benchmarks in order; returns 1 if any failed."""
    args = parse_args(argv)
    arguments = (["--short"] if args.short else []) + (["--data", args.data] if args.data else [])
    started = today()
    # A finished recipe run in the work directory is reported on, not trained again.
    reused = not args.short and finished_model(args.workdir).is_file()
    outcomes = []
    # Short mode: each benchmark once, on tiny random models.
    stages = [(name, False) for name in BENCHMARKS] if args.short else STAGES
    for name, trained in stages:
        if name not in args.only:
            continue
        extra, label = [], None
        if name == "quality" and not args.short:
            extra = ["--workdir", str(args.workdir)]
            extra += ["--budgets", args.budgets] if args.budgets else []
        if trained:
            extra, label = ["--model", str(args.workdir / "run")], f"{name} (trained model)"
        outcomes.append(run_benchmark(name, arguments + extra, label))
    table = summary_table(outcomes)
    print(f"\n{table}")
    if not args.short:
        kept, origins = kept_rows(
            read_section("summary"), {o.name.split(" (")[0] for o in outcomes}
        )
        if kept:
            table += "\n" + "\n".join(kept)
        this_run = f"{started} (`{command_line()}`)"
        provenance = {**origins, **{o.name: this_run for o in outcomes}}
        note = kept_note(origins)
        timings = ", ".join(f"{o.name} {o.seconds / 60:.1f} min" for o in outcomes)
        update_section(
            "summary",
            f"""## Summary: the targets

{table}

Each row is measured by the benchmark named in it (its section below has the details and,
for a missed target, the gap and what the profile shows).

- Command: `{command_line()}` ({timings}){reuse_note(args.workdir) if reused else ""}{note}
- Started: {started}
- Machine: {machine_summary()}
<!-- provenance: {json.dumps(provenance)} -->
""",
        )
    failed = [o.name for o in outcomes if o.returncode != 0]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
