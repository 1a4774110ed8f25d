"""Writing benchmark figures into bench/RESULTS.md, one section per benchmark.

Each benchmark owns one section, delimited by HTML comments, and replaces only that
section; text outside the markers (and other benchmarks' sections) is left alone:

    from bench.results import machine_summary, update_section
    update_section("training", "## Training\\n\\n| ... |\\n")
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import platform
import re
import shlex
import sys
from pathlib import Path

RESULTS_PATH = Path(__file__).resolve().with_name("RESULTS.md")
# The words of the sections, one Markdown template per benchmark: found beside this file.
TEMPLATES = Path(__file__).resolve().with_name("templates")
# A part of a template starts at a line holding only this comment.
PART_MARKER = re.compile(r"^<!-- part: ([\w-]+) -->\n", re.MULTILINE)
HEADER = (
    "# Benchmark results\n\n"
    "Each section is written by the benchmark named in it (`python -m bench.<name>`), which\n"
    "replaces its own section on every full run. Figures depend on the machine; each section\n"
    "says which one.\n"
)


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


def update_section(name: str, markdown: str, path: str | os.PathLike[str] = RESULTS_PATH) -> Path:
    """Replaces (or appends) the section `name` of the results file.

    Args:
        name: Section key, e.g. "pipeline"; letters, digits, "-" and "_".
        markdown: The section's content (usually starting with a "## " heading).
        path: The results file; created with a header if missing.

    Returns:
        The path written.
    """
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
    match = re.search(
        re.escape(begin) + r"\n(.*?)\n" + re.escape(end), path.read_text("utf-8"), re.DOTALL
    )
    return match.group(1) if match else None


def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo (or platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_summary() -> str:
    """One line: cores, CPU model, OS, Python and TensorFlow versions."""
    try:
        import tensorflow as tf

        tf_version = tf.__version__
    except ImportError:  # pragma: no cover
        tf_version = "not installed"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{cores} cores (nproc), {cpu_model()}, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, TensorFlow {tf_version}"
    )


def command_line() -> str:
    """The command that is running, as one could type it again."""
    module = sys.modules["__main__"].__spec__
    # `python -m bench` runs the package's __main__ module: show what was typed.
    name = None if module is None else module.name.removesuffix(".__main__")
    head = ["python", "-m", name] if name is not None else ["python", sys.argv[0]]
    return shlex.join([*head, *sys.argv[1:]])


def today() -> str:
    """The date, ISO format (UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


# Lines starting with this marker carry one target's figure as JSON, for `python -m bench`
# to collect into its summary table.
TARGET_MARKER = "bench-target:"


def report_target(
    name: str, measured: float, goal: float, unit: str, higher_is_better: bool = True
) -> bool:
    """Prints one target's figure in the line format `python -m bench` collects.

    Args:
        name: What is measured, e.g. "training target tokens/s (fp32)".
        measured: The measured figure.
        goal: The target figure.
        unit: The unit of both, e.g. "tok/s" or "x".
        higher_is_better: Whether the target is a minimum (else a maximum).

    Returns:
        Whether the target is met.
    """
    met = measured >= goal if higher_is_better else measured <= goal
    record = {"name": name, "measured": measured, "goal": goal, "unit": unit, "met": met}
    record["higher_is_better"] = higher_is_better
    print(f"{TARGET_MARKER} {json.dumps(record)}", flush=True)
    return met


def parse_targets(output: str) -> list[dict]:
    """The target records printed by `report_target` in a benchmark's output."""
    return [
        json.loads(line[len(TARGET_MARKER) :])
        for line in output.splitlines()
        if line.startswith(TARGET_MARKER)
    ]


@functools.cache
def template_parts(path: str | os.PathLike[str]) -> dict[str, str]:
    """{name: text} of a template's parts, each without the blank lines that end it.

    A template (bench/templates/<benchmark>.md) holds the words of a section; the
    benchmark computes figures and fills a part with `render`.
    """
    pieces = PART_MARKER.split(Path(path).read_text("utf-8"))  # [header, name, text, ...]
    return {name: text.rstrip("\n") for name, text in zip(pieces[1::2], pieces[2::2], strict=True)}


def render(path: str | os.PathLike[str], part: str, **figures) -> str:
    """The template's `part` with its fields filled from `figures` (str.format_map)."""
    return template_parts(path)[part].format_map(figures)


def bind_template(path: str | os.PathLike[str]):
    """`(template_parts, render)` of one benchmark's template, its path bound.

    A benchmark module writes `template_parts, render = bind_template(TEMPLATE)` and then
    `render("part", **figures)`.
    """

    def parts() -> dict[str, str]:
        return template_parts(path)

    def fill(part: str, **figures) -> str:
        return render(path, part, **figures)

    return parts, fill
