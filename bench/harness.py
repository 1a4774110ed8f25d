"""What every benchmark shares: data, options, timing, templates and bench/RESULTS.md.

A benchmark (`python -m bench.<name>`, run from the repository root) parses its options
with `make_parser`/`parse`, finds Multi30k with `find_data`, times with `best_of`, prints
each target with `report_target` (`python -m bench` gathers those lines), and ends with
`publish`, which fills its template (bench/templates/<name>.md) and replaces its own
section of RESULTS.md, between HTML comment markers, in full runs only.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import re
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before any benchmark imports TensorFlow

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS_PATH = BENCH / "RESULTS.md"
TEMPLATES = BENCH / "templates"
TRAIN = ("train.en.gz", "train.de.gz")
TEST_SOURCE, TEST_REFERENCE = "test_2016_flickr.en.gz", "test_2016_flickr.de.gz"
# A part of a template starts at a line holding only this comment.
PART_MARKER = re.compile(r"^<!-- part: ([\w-]+) -->\n", re.MULTILINE)
# Lines starting with this carry one target's figure as JSON, for `python -m bench`.
TARGET_MARKER = "bench-target:"
HEADER = (
    "# Benchmark results\n\n"
    "Each section is written by the benchmark named in it (`python -m bench.<name>`), which\n"
    "replaces its own section on every full run. Figures depend on the machine; each section\n"
    "says which one.\n"
)
T = TypeVar("T")


def _load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


# Taken when the benchmark starts (it imports this first): other load lowers the figures.
LOAD_AT_START = _load_average()


def find_data(explicit: str | None, files: tuple[str, ...] = TRAIN) -> Path:
    """The Multi30k directory holding `files`: `explicit` (--data), else
    $TRANSLATOR_DATA_MIRROR (or its multi30k/), else <repo>/../shared/data/multi30k.

    Raises:
        SystemExit: None of them holds the files.
    """
    if explicit:
        candidates = [Path(explicit)]
    elif os.environ.get("TRANSLATOR_DATA_MIRROR"):
        mirror = Path(os.environ["TRANSLATOR_DATA_MIRROR"])
        candidates = [mirror / "multi30k", mirror]
    else:
        candidates = [REPO.parent / "shared" / "data" / "multi30k"]
    for directory in candidates:
        if all((directory / name).is_file() for name in files):
            return directory
    raise SystemExit(
        f"bench: Multi30k {'/'.join(files)} not found in {', '.join(map(str, candidates))}; "
        "pass --data DIR or set TRANSLATOR_DATA_MIRROR"
    )


def make_parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The options of `python -m bench.<name>`: --short, --data, --write, --results."""
    parser = argparse.ArgumentParser(
        prog=f"python -m bench.{name}", description=(doc or "").split("\n\n")[0]
    )
    parser.add_argument("--short", action="store_true", help="quick check at small sizes")
    parser.add_argument("--data", help="Multi30k directory (default: the mirror)")
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="update the results file (default: yes, no with --short)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS_PATH, help="the results file")
    return parser


def parse(
    parser: argparse.ArgumentParser, argv: list[str] | None, **defaults: tuple[Any, Any]
) -> argparse.Namespace:
    """The options; those left unset take `defaults`: {option: (full run's, short run's)}
    (--write: yes, no)."""
    args = parser.parse_args(argv)
    for name, values in {"write": (True, False), **defaults}.items():
        if getattr(args, name) is None:
            setattr(args, name, values[args.short])
    return args


def translator_command(*arguments: str) -> list[str]:
    """`python -m translator ARGUMENTS` with this interpreter (and so this sys.path)."""
    return [sys.executable, "-m", "translator", *arguments]


def best_of(function: Callable[[], T], repeats: int, warmup: int = 1) -> tuple[float, T]:
    """(seconds, result) of the fastest of `repeats` calls, after `warmup` untimed ones.

    The fastest counts: other processes on a shared machine only ever slow a call down.
    """
    for _ in range(warmup):
        function()
    best: tuple[float, Any] = (float("inf"), None)
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        best = min(best, (time.perf_counter() - started, result), key=lambda pair: pair[0])
    return best


def report_target(
    name: str, measured: float, goal: float, unit: str, higher_is_better: bool = True
) -> bool:
    """Prints a target's figure (`goal`: a minimum, or a maximum if not `higher_is_better`)
    as a line `python -m bench` collects; returns whether it is met."""
    met = measured >= goal if higher_is_better else measured <= goal
    record = {"name": name, "measured": measured, "goal": goal, "unit": unit, "met": met}
    record["higher_is_better"] = higher_is_better
    print(f"{TARGET_MARKER} {json.dumps(record)}", flush=True)
    return met


def parse_targets(output: str) -> list[dict[str, Any]]:
    """The target records `report_target` printed in a benchmark's output."""
    return [
        json.loads(line[len(TARGET_MARKER) :])
        for line in output.splitlines()
        if line.startswith(TARGET_MARKER)
    ]


def verdict(measured: float, goal: float, higher_is_better: bool = True) -> str:
    """ "meets" or "MISSES": the word a section says of a target."""
    met = measured >= goal if higher_is_better else measured <= goal
    return "meets" if met else "MISSES"


class Template:
    """The words of a section, bench/templates/<name>.md, in parts: each from its marker
    line (`<!-- part: NAME -->`) to the next, its fields filled with `str.format_map`."""

    def __init__(self, name: str):
        self.path = TEMPLATES / f"{name}.md"

    @functools.cached_property
    def parts(self) -> dict[str, str]:
        """{part name: text}."""
        pieces = PART_MARKER.split(self.path.read_text("utf-8"))  # [head, name, text, ...]
        return {n: text.rstrip("\n") for n, text in zip(pieces[1::2], pieces[2::2], strict=True)}

    def __call__(self, part: str, **figures: Any) -> str:
        """The part with its fields filled from `figures`."""
        return self.parts[part].format_map(figures)


def machine_summary() -> str:
    """One line: cores, CPU model, OS, Python and TensorFlow versions."""
    try:
        import tensorflow as tf

        tf_version = tf.__version__
    except ImportError:  # pragma: no cover
        tf_version = "not installed"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    models = re.findall(r"^model name\s*: (.*)$", cpuinfo, re.MULTILINE)
    cpu = models[0].strip() if models else platform.processor() or "unknown CPU"
    return (
        f"{cores} cores (nproc), {cpu}, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, TensorFlow {tf_version}"
    )


def command_line() -> str:
    """The command that is running, as one could type it again."""
    spec = sys.modules["__main__"].__spec__
    # `python -m bench` runs the package's __main__ module: show what was typed.
    name = None if spec is None else spec.name.removesuffix(".__main__")
    head = ["python", "-m", name] if name is not None else ["python", sys.argv[0]]
    return shlex.join([*head, *sys.argv[1:]])


def today() -> str:
    """The date and time, UTC."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def footer() -> dict[str, str]:
    """The fields of every section's last lines: command, date, machine, load at the start."""
    return dict(command=command_line(), date=today(), machine=machine_summary(), load=LOAD_AT_START)


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


def update_section(name: str, markdown: str, path: str | os.PathLike[str] = RESULTS_PATH) -> Path:
    """Replaces (or appends) the section `name` (letters, digits, "-", "_") of the results
    file, created with a header if missing; the rest stays. Returns the path written."""
    if not re.fullmatch(r"[\w-]+", name):
        raise ValueError(f"section name must be letters, digits, '-' or '_', got {name!r}")
    path = Path(path)
    text = path.read_text("utf-8") if path.is_file() else HEADER
    begin, end = _markers(name)
    block = f"{begin}\n{markdown.strip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text if text.endswith("\n") else text + "\n", "utf-8")
    return path


def read_section(name: str, path: str | os.PathLike[str] = RESULTS_PATH) -> str | None:
    """The current content of section `name`, or None."""
    path = Path(path)
    if not path.is_file():
        return None
    begin, end = _markers(name)
    pattern = re.escape(begin) + r"\n(.*?)\n" + re.escape(end)
    match = re.search(pattern, path.read_text("utf-8"), re.DOTALL)
    return match.group(1) if match else None


def publish(
    args: argparse.Namespace, section: str, compose: Callable[..., str], *arguments: Any
) -> None:
    """The end of a benchmark: writes `compose(*arguments)` as `section` if `args.write`."""
    if args.write:
        path = update_section(section, compose(*arguments), args.results)
        print(f"wrote the {section} section of {path}", flush=True)
