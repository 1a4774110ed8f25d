"""Every benchmark, one command: `python -m bench [--short] [--only NAMES] [--workdir DIR]`.

Full mode trains OpenNMT-tf beside `translator train` (peers), the planner's trial grid
(planner, about two hours) and the recipe for 5, 15 and 60 minutes (quality, the 60-minute
run in `--workdir`; a finished run is reported on, not trained again), then measures
decoding, engines and serving on that model. Short mode runs each benchmark once on tiny
random models and writes nothing. Each benchmark runs as its own process, so TensorFlow
state never leaks from one into the next; the `bench-target:` lines they print become the
summary at the top of RESULTS.md. Exit code 1 if a benchmark failed (a missed target is a
figure, not a failure).
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

from bench import harness

render = harness.Template("summary")
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
# In the order they run: the cheap ones first, then the hour of training, then what needs
# its model. (benchmark, whether it runs on the recipe's trained model in full mode)
STAGES = (
    *(
        (name, False)
        for name in ("pipeline", "training", "peers", "planner", "decoding", "quality")
    ),
    *((name, True) for name in ("decoding", "engines", "serving")),
)
DEFAULT_WORKDIR = Path("runs/bench-recipe")
# The summary records, per row label, the run its rows come from, so that a partial run
# (`--only`) keeps each kept row's own origin, not the previous run's.
PROVENANCE = re.compile(r"^<!-- provenance: (.*) -->$", re.MULTILINE)


@dataclasses.dataclass
class Outcome:
    """What one benchmark process did: exit code, wall seconds, `bench-target:` records."""

    name: str
    returncode: int
    seconds: float
    targets: list[dict]


def run_benchmark(name: str, arguments: list[str], label: str | None = None) -> Outcome:
    """Runs `python -m bench.<name> ARGUMENTS`, echoing its output as it comes."""
    command = [sys.executable, "-m", f"bench.{name}", *arguments]
    name = label or name
    print(f"\n=== bench.{name}: {' '.join(command[1:])}", flush=True)
    started, lines = time.perf_counter(), []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as process:
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    seconds = time.perf_counter() - started
    print(f"=== bench.{name}: exit {process.returncode} after {seconds:.0f} s", flush=True)
    return Outcome(name, process.returncode, seconds, harness.parse_targets("".join(lines)))


def summary_table(outcomes: list[Outcome]) -> str:
    """The markdown table of every target, one row each."""
    rows = [render("table-head")]
    for outcome in outcomes:
        if outcome.returncode != 0:
            rows.append(render("failed", name=outcome.name, returncode=outcome.returncode))
        for t in outcome.targets:
            sign = ">=" if t.get("higher_is_better", True) else "<="
            figures = dict(measured=_figure(t["measured"]), goal=_figure(t["goal"]))
            met = "yes" if t["met"] else "no"
            rows.append(render("row", name=outcome.name, t=t, sign=sign, met=met, **figures))
    return "\n".join(rows)


def _figure(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def kept_rows(previous: str | None, ran: set[str]) -> tuple[list[str], dict[str, str]]:
    """The previous summary's rows of benchmarks this run did not run, and their origins."""
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


def finished_model(workdir: Path) -> Path:
    """The metadata file a finished recipe run in `workdir` has (its final model's)."""
    return workdir / "run" / "model" / "metadata.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="quick check; writes nothing")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated subset")
    parser.add_argument("--data", help="directory with the Multi30k files (default: the mirror)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="the recipe's")
    parser.add_argument("--budgets", help="full mode: bench.quality's budgets (5,15,60)")
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    if unknown := sorted(set(args.only) - set(BENCHMARKS)):
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {BENCHMARKS}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Runs the selected benchmarks in order; returns 1 if any failed."""
    args = parse_args(argv)
    arguments = (["--short"] if args.short else []) + (["--data", args.data] if args.data else [])
    started = harness.today()
    # A finished recipe run in the work directory is reported on, not trained again.
    reused = not args.short and finished_model(args.workdir).is_file()
    outcomes = []
    for name, trained in [(name, False) for name in BENCHMARKS] if args.short else STAGES:
        if name not in args.only:
            continue
        extra, label = [], None
        if name == "quality" and not args.short:
            extra = ["--workdir", str(args.workdir)] + (
                ["--budgets", args.budgets] * bool(args.budgets)
            )
        if trained:
            extra, label = ["--model", str(args.workdir / "run")], f"{name} (trained model)"
        outcomes.append(run_benchmark(name, arguments + extra, label))
    table = summary_table(outcomes)
    print(f"\n{table}")
    if not args.short:
        ran = {o.name.split(" (")[0] for o in outcomes}
        kept, origins = kept_rows(harness.read_section("summary"), ran)
        this_run = f"{started} (`{harness.command_line()}`)"
        reuse = ""
        if reused:
            path = finished_model(args.workdir)
            minutes = json.loads(path.read_text("utf-8")).get("training_seconds", 0) / 60
            saved = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
            reuse = render("reuse", workdir=args.workdir, saved=saved, minutes=minutes)
        section = render(
            "section",
            **harness.footer(),
            table="\n".join([table, *kept]),
            timings=", ".join(f"{o.name} {o.seconds / 60:.1f} min" for o in outcomes),
            reuse=reuse,
            kept=kept_note(origins),
            started=started,
            provenance=json.dumps({**origins, **{o.name: this_run for o in outcomes}}),
        )
        harness.update_section("summary", section)
    if failed := [o.name for o in outcomes if o.returncode != 0]:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
