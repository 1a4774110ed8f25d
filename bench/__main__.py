"""Every benchmark, one command: `python -m bench [--short] [--only NAMES] [--workdir DIR]`,
each in its own process, their `bench-target:` lines the summary; full mode measures again on
the recipe's 60-minute model (one finished in --workdir is reused). Exit 1 if one failed."""

import argparse
import collections
import datetime
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from bench import harness

render = harness.Template("summary")
# Full mode's order: the cheap ones, the hours of training, then what needs the recipe's model.
STAGES = [(name, False) for name in ("pipeline", "training", "peers", "decoding")]
STAGES += [("quality", False), ("decoding", True), ("engines", True), ("serving", True)]
STAGES += [("backends", True)]
BENCHMARKS = tuple(dict.fromkeys(name for name, _ in STAGES))
DEFAULT_WORKDIR = Path("runs/bench-recipe")
# Per row label, the run its rows come from, so that a partial run (`--only`) keeps each kept
# row's own origin, not the previous run's.
PROVENANCE = re.compile(r"^<!-- provenance: (.*) -->$", re.MULTILINE)
Outcome = collections.namedtuple("Outcome", "name returncode seconds targets")  # of a process


def run_benchmark(name: str, arguments: list[str], label: str | None = None) -> Outcome:
    command, name = [sys.executable, "-m", f"bench.{name}", *arguments], label or name
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
    rows = [render("table-head")]
    for outcome in outcomes:
        if outcome.returncode != 0:
            rows.append(render("failed", name=outcome.name, returncode=outcome.returncode))
        for t in outcome.targets:
            sign = ">=" if t.get("higher_is_better", True) else "<="
            digits = {k: 0 if abs(t[k]) >= 100 else 2 for k in ("measured", "goal")}
            figures = {k: f"{t[k]:,.{n}f}" for k, n in digits.items()}
            met = "yes" if t["met"] else "no"
            rows.append(render("row", name=outcome.name, t=t, sign=sign, met=met, **figures))
    return "\n".join(rows)


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
    fallback = started.group(1) if started else "an earlier run"
    labels = dict.fromkeys(row.split("|")[1].strip() for row in rows)
    return rows, {label: recorded.get(label, fallback) for label in labels}


def kept_note(origins: dict[str, str]) -> str:
    """The summary's line naming, per origin, the rows kept from it ('' if none)."""
    by_origin: dict[str, list[str]] = {}
    for label, origin in origins.items():
        by_origin.setdefault(origin, []).append(label)
    parts = "; ".join(
        render("kept-origin", labels=", ".join(sorted(v)), origin=o) for o, v in by_origin.items()
    )
    return render("kept", parts=parts) if parts else ""


def reuse_note(workdir: Path) -> str:
    """The summary's line on a recipe run finished before this one ('' if none)."""
    path = workdir / "run" / "model" / "metadata.json"  # a finished run's final model
    if not path.is_file():
        return ""
    minutes = json.loads(path.read_text("utf-8")).get("training_seconds", 0) / 60
    saved = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
    return render("reuse", workdir=workdir, saved=saved, minutes=minutes)


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--short", action="store_true", help="quick check; writes nothing")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated subset")
    parser.add_argument("--data", help="directory with the Multi30k files (default: the mirror)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="the recipe's")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    if unknown := sorted(set(only) - set(BENCHMARKS)):
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {BENCHMARKS}")
    arguments = (["--short"] if args.short else []) + (["--data", args.data] if args.data else [])
    started, reuse = harness.today(), "" if args.short else reuse_note(args.workdir)
    outcomes = []
    for name, trained in [(name, False) for name in BENCHMARKS] if args.short else STAGES:
        recipe = name == "quality" and not args.short  # the run the trained model comes from
        extra, label = ["--workdir", str(args.workdir)] if recipe else [], None
        if trained:
            extra, label = ["--model", str(args.workdir / "run")], f"{name} (trained model)"
        if name in only:
            outcomes.append(run_benchmark(name, arguments + extra, label))
    table = summary_table(outcomes)
    print(f"\n{table}")
    if not args.short:  # the section's fields: these local names
        ran = {o.name.split(" (")[0] for o in outcomes}
        kept, origins = kept_rows(harness.read_section("summary"), ran)
        table, kept = "\n".join([table, *kept]), kept_note(origins)
        this_run = f"{started} (`{harness.command_line()}`)"
        timings = ", ".join(f"{o.name} {o.seconds / 60:.1f} min" for o in outcomes)
        provenance = json.dumps({**origins, **{o.name: this_run for o in outcomes}})
        harness.update_section("summary", render("section", **harness.footer(), **locals()))
    if failed := [o.name for o in outcomes if o.returncode != 0]:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
