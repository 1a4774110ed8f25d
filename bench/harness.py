"""What every benchmark shares: data, options, timing, child processes, models, templates and
the sections of RESULTS.md. No TensorFlow at import: `bench.accelerator run` imports it."""

import argparse
import datetime
import functools
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from translator.constants import EOS_ID, PAD_ID
from translator.engines.base import usable_cores

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS_PATH = BENCH / "RESULTS.md"
TEMPLATES = BENCH / "templates"
SHARED_MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
TRAIN = ("train.en.gz", "train.de.gz")
TEST_SOURCE, TEST_REFERENCE = "test_2016_flickr.en.gz", "test_2016_flickr.de.gz"
PART_MARKER = re.compile(r"^<!-- part: ([\w-]+) -->\n", re.MULTILINE)
TARGET_MARKER = "bench-target:"  # a line carrying one target's figure, for `python -m bench`
# Taken when the benchmark starts (it imports this first): other load lowers the figures.
LOAD_AT_START = "/".join(f"{x:.1f}" for x in os.getloadavg())


def find_data(explicit: str | None, files: tuple[str, ...] = TRAIN) -> Path:
    """The Multi30k directory holding `files`: --data, else $TRANSLATOR_DATA_MIRROR (or its
    multi30k/), else <repo>/../shared/data/multi30k; SystemExit if none has them."""
    mirror = os.environ.get("TRANSLATOR_DATA_MIRROR")
    candidates = [Path(mirror) / "multi30k", Path(mirror)] if mirror else [SHARED_MULTI30K]
    for directory in [Path(explicit)] if explicit else candidates:
        if all((directory / name).is_file() for name in files):
            return directory
    where = ", ".join(map(str, [Path(explicit)] if explicit else candidates))
    raise SystemExit(
        f"bench: Multi30k {'/'.join(files)} not found in {where}; "
        "pass --data DIR or set TRANSLATOR_DATA_MIRROR"
    )


def make_parser(name: str, doc: str | None, model: bool = False) -> argparse.ArgumentParser:
    """The options of `python -m bench.<name>`: --short, --data, --write, --results (--model)."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=doc)
    parser.add_argument("--short", action="store_true", help="quick check at small sizes")
    parser.add_argument("--data", help="Multi30k directory (default: the mirror)")
    write = argparse.BooleanOptionalAction
    parser.add_argument("--write", action=write, help="update the results (not with --short)")
    parser.add_argument("--results", type=Path, default=RESULTS_PATH, help="the results file")
    if model:
        parser.add_argument("--model", help="trained model or run directory")
    return parser


def parse(parser: argparse.ArgumentParser, argv, **defaults: tuple[Any, Any]):
    """The options; those left unset take `defaults`: {option: (full run's, short run's)}."""
    args = parser.parse_args(argv)
    for name, values in {"write": (True, False), **defaults}.items():
        if getattr(args, name, None) is None:
            setattr(args, name, values[args.short])
    return args


def command(main: Callable[..., int]) -> Callable[..., int]:
    """Decorates a benchmark's `main`, defined last: run as `python -m bench.<name>`, runs it."""
    if main.__module__ == "__main__":
        raise SystemExit(main())
    return main


def run_translator(*arguments: str) -> None:
    """Runs `python -m translator ARGUMENTS`, echoed first; raises if it fails."""
    command = [sys.executable, "-m", "translator", *arguments]  # this interpreter, sys.path
    print(shlex.join(command[1:]), flush=True)
    subprocess.run(command, check=True)


def run_for(command: list[str], seconds: float, log: Path, env: dict | None = None) -> str:
    """Runs `command` for at most `seconds`; returns its output (kept in `log`)."""
    with log.open("w", encoding="utf-8") as out:
        try:
            env = {**os.environ, **(env or {})}
            subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=seconds)
        except subprocess.TimeoutExpired:
            pass  # stopped: what it logged so far is what counts
    return log.read_text("utf-8", errors="replace")


def run_child(module: str, *arguments: str, env: dict | None = None) -> Any:
    """`python -m bench.MODULE ARGUMENTS --child-out=FILE` in a fresh process (so no TensorFlow
    state is shared); returns the JSON it wrote to FILE."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, "-m", f"bench.{module}", *arguments, f"--child-out={out.name}"]
        env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        subprocess.run(command, check=True, cwd=REPO, env=env)
        return json.loads(Path(out.name).read_text())


def quiet() -> None:
    """No warnings, no pipeline notes: a benchmark's own lines are its output."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("translator.pipelines").setLevel(logging.ERROR)


def vocabulary(directory: Path, data: Path, vocab_size: int = 8000):
    """The joint Multi30k vocabulary in `directory`, built there first if missing."""
    from translator.pipelines import build_vocabulary, load_vocabulary

    if not (directory / "vocab.json").is_file():
        files = [data / name for name in TRAIN]
        build_vocabulary(files[:1], files[1:], directory, vocab_size=vocab_size)
    return load_vocabulary(directory)


def random_model(root: Path, data: Path, preset: str, vocab_size: int) -> Path:
    """A `preset` model, random weights, a joint Multi30k vocabulary: root/model (returned)."""
    import keras

    from translator import Transformer, TransformerConfig
    from translator.artifacts import save_model_dir

    vocabulary(root / "vocab", data, vocab_size)
    keras.utils.set_random_seed(0)
    model = Transformer(TransformerConfig.preset(preset, vocab_size=vocab_size, dropout=0.0))
    model.build()
    return save_model_dir(root / "model", model, root / "vocab", {"weights": "random"})


def source_batches(lines: list[str], tokenizer, cut: int, batch_tokens: int) -> list:
    """The length-sorted `[b, width]` id arrays `Translator` searches `lines` in."""
    import tensorflow as tf

    from translator.text import batch_ranges, prepare

    prepared = prepare(tf.constant(lines, tf.string), tokenizer, cut)
    ids = prepared.source_ids.numpy()
    return [ids[a:b, :w] for a, b, w in batch_ranges(prepared.lengths.numpy(), batch_tokens)]


def until_eos(ids: list[int]) -> list[int]:
    """A hypothesis' ids up to its EOS (included), padding left out."""
    ids = [token for token in ids if token != PAD_ID]
    return ids[: ids.index(EOS_ID) + 1] if EOS_ID in ids else ids


def best_of(function: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[float, Any]:
    """(seconds, result) of the fastest of `repeats` calls after `warmup` untimed ones: other
    processes on a shared machine only ever slow a call down."""
    for _ in range(warmup):
        function()
    best: tuple[float, Any] = (float("inf"), None)
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        best = min(best, (time.perf_counter() - started, result), key=lambda pair: pair[0])
    return best


def matmul_rate(product: Callable[[], Any], size: int, repeats: int) -> float:
    """FLOP/s of `product`: `repeats` square `size` matmuls, finished on return; best of 3."""
    return 2.0 * size**3 * repeats / best_of(product, 3)[0]


def report_target(name: str, measured: float, goal: float, unit: str, higher_is_better=True):
    """Prints a target's figure as a line `python -m bench` collects; returns whether met."""
    met = measured >= goal if higher_is_better else measured <= goal
    record = {"name": name, "measured": measured, "goal": goal, "unit": unit, "met": met}
    record["higher_is_better"] = higher_is_better
    print(f"{TARGET_MARKER} {json.dumps(record)}", flush=True)
    return met


def parse_targets(output: str) -> list[dict[str, Any]]:
    marker = len(TARGET_MARKER)
    return [json.loads(s[marker:]) for s in output.splitlines() if s.startswith(TARGET_MARKER)]


def verdict(measured: float, goal: float) -> str:
    """ "meets" or "MISSES": the word a section says of a target (a minimum)."""
    return "meets" if measured >= goal else "MISSES"


class Template:
    """bench/templates/<name>.md in parts, each from its `<!-- part: NAME -->` line to the
    next, filled with `str.format_map`."""

    def __init__(self, name: str):
        self.path = TEMPLATES / f"{name}.md"

    @functools.cached_property
    def parts(self) -> dict[str, str]:
        pieces = PART_MARKER.split(self.path.read_text("utf-8"))  # [head, name, text, ...]
        return {n: text.rstrip("\n") for n, text in zip(pieces[1::2], pieces[2::2], strict=True)}

    def __call__(self, part: str, **figures: Any) -> str:
        return self.parts[part].format_map(figures)


def machine_summary() -> str:
    import tensorflow as tf

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    models = re.findall(r"^model name\s*: (.*)$", cpuinfo, re.MULTILINE)
    cpu = models[0].strip() if models else platform.processor() or "unknown CPU"
    return (
        f"{usable_cores()} cores (nproc), {cpu}, {platform.system()} "
        f"{platform.machine()}, Python {platform.python_version()}, TensorFlow {tf.__version__}"
    )


def command_line() -> str:
    """The command that is running, as typed (`python -m bench`, not bench.__main__)."""
    spec = sys.modules["__main__"].__spec__
    head = [sys.argv[0]] if spec is None else ["-m", spec.name.removesuffix(".__main__")]
    return shlex.join(["python", *head, *sys.argv[1:]])


def today() -> str:  # UTC
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def footer() -> dict[str, str]:
    """The fields of every section's last lines: command, date, machine, load at the start."""
    return dict(command=command_line(), date=today(), machine=machine_summary(), load=LOAD_AT_START)


def _section_pattern(name: str) -> re.Pattern:
    return re.compile(rf"<!-- bench:{name}:begin -->\n(.*?)\n<!-- bench:{name}:end -->", re.S)


def update_section(name: str, markdown: str, path: str | os.PathLike[str] = RESULTS_PATH) -> Path:
    """Replaces (or appends) the section `name` of the results file (made with a header if
    missing); the rest stays. Returns the path written."""
    if not re.fullmatch(r"[\w-]+", name):
        raise ValueError(f"section name must be letters, digits, '-' or '_', got {name!r}")
    path = Path(path)
    text = path.read_text("utf-8") if path.is_file() else Template("summary")("header")
    block = f"<!-- bench:{name}:begin -->\n{markdown.strip()}\n<!-- bench:{name}:end -->"
    text, found = _section_pattern(name).subn(lambda _: block, text, count=1)
    text = text if found else text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text if text.endswith("\n") else text + "\n", "utf-8")
    return path


def read_section(name: str, path: str | os.PathLike[str] = RESULTS_PATH) -> str | None:
    path = Path(path)
    match = path.is_file() and _section_pattern(name).search(path.read_text("utf-8"))
    return match.group(1) if match else None


def publish(args, section: str, compose: Callable[..., str], *arguments) -> int:
    """The end of a benchmark: writes `compose(*arguments)` as `section` if `args.write`;
    returns the exit code, 0."""
    if args.write:
        path = update_section(section, compose(*arguments), args.results)
        print(f"wrote the {section} section of {path}", flush=True)
    return 0
