"""The README's example commands, run as written, in order, on files the test makes.

Every `translator ...` line of the README's ```bash blocks runs in a temporary directory
(its relative paths land there), with its budget cut to seconds and its validation and test
sets to 20 sentences, and must exit 0 and write what it names. The corpora it names are
Multi30k slices under the names the README uses (the language codes of their suffixes are
all the test can vouch for). What is left out says why in `LEFT_OUT`.

The lines run in independent chains (`chains`), one test each, so that a chain that
fails does not hide the others: a chain is the lines that touch one work directory
(`runs/...`), or read what an earlier line wrote, in the README's order, each preceded by
the lines that write what it reads under data/. Those run once, in the first chain that
needs them; the others get a copy of what they wrote (`Machine`), and share one speed
cache. Slow: about 40 runs of the toolkit, nine recipes.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.corpora import read_gz_lines
from tests.support.readme import readme_commands

# Seconds, not minutes: every budget of a README command becomes this many minutes (a
# recipe's timings take longer than that: the planner's, not the budget's, seconds).
BUDGET = "0.1"
# Validation and test sets cut to a few sentences: a model trained for seconds writes
# hypotheses to the length limit, and a thousand of them are minutes that check nothing more.
SENTENCES = {
    "recipe": " --test-sentences 20 --set eval.max_sentences=20",
    "train": " --set eval.max_sentences=20",
}
# A distillation's budget covers the students' timing and the teacher's translation too:
# a README distillation gets these minutes and translates this many pairs.
DISTILL_BUDGET, DISTILL_PAIRS = "2.5", " --distill-pairs 300"
# The folders whose first two parts name a line's work: its chain.
WORK_FOLDERS = ("runs/", "data/", "exports/", "reports/")
# What a line reads without naming it: `translator train --run-dir` without a config reads
# the README's default config, whose corpus and vocabulary are under data/multi30k; the
# back-translation model is a copy of runs/m30k (the test makes it).
IMPLIED = {
    "--run-dir ": {"data/multi30k/train.en.gz", "data/multi30k/vocab"},
    "runs/m30k-de-en": {"runs/m30k"},
}
# (what a line holds, why it is not run).
LEFT_OUT = (
    ("pip install", "installs; the test runs in the installed environment"),
    ("python -m pytest", "the test command itself"),
    ("translator serve", "serving has its own tests (tests/serving), over real ports"),
    ("translator import marian", "downloads an OPUS-MT model (the internet)"),
    ("models/en-", "an OPUS-MT model that `translator import marian` downloads"),
    ("opus-mt-en-de", "an OPUS-MT model downloaded (the internet)"),
)


def runnable(command: str) -> str | None:
    """The command as the test runs it (budgets cut), or None if it is left out."""
    if any(marker in command for marker, _ in LEFT_OUT):
        segments = [s.strip() for s in command.split("&&")]
        kept = [s for s in segments if not any(m in s for m, _ in LEFT_OUT)]
        if not kept or len(kept) == len(segments):
            return None
        command = " && ".join(kept)
    code, hash_, comment = command.partition(" #")
    if re.match(r"translator (recipe|train) ", code) and "--help" not in code:
        code = code.rstrip() + SENTENCES[code.split()[1]]
    command = f"{code} {hash_}{comment}" if hash_ else code
    command = re.sub(r"(--minutes|--max-minutes) \S+", rf"\1 {BUDGET}", command)
    command = re.sub(r"train\.max_minutes=\S+", f"train.max_minutes={BUDGET}", command)
    if "--distill-from" in command:
        command = command.replace(f"--minutes {BUDGET}", f"--minutes {DISTILL_BUDGET}")
        command += DISTILL_PAIRS
    budgetless = "minutes" not in command and "--help-config" not in command
    if command.startswith("translator train ") and budgetless:
        command = command.replace(
            "translator train ", f"translator train --max-minutes {BUDGET} ", 1
        )
    return command


def written(command: str) -> list[str]:
    """What the command says it writes (paths relative to the working directory)."""
    argv = command.split("#")[0].split()
    value = {flag: argv[i + 1] for i, flag in enumerate(argv[:-1]) if flag.startswith("-")}
    paths = []
    if ">" in argv:
        paths.append(argv[argv.index(">") + 1])
    for flag in ("-o", "--out-src", "--out-tgt", "--hyp-out", "--dest"):
        if flag in value:
            paths.append(value[flag])
    if "--report" in value:
        paths.append(f"{value['--report']}/report.json")
    if "--plan" not in argv:
        if "recipe" in argv:
            paths.append(f"{value['--workdir']}/export/1/saved_model.pb")
        if "train" in argv and "--run-dir" in value:
            paths.append(f"{value['--run-dir']}/config.yaml")
        if "export" in argv:
            ct2 = value.get("--format") == "ctranslate2"
            paths.append(f"{value['--out']}/model.bin" if ct2 else f"{value['--out']}/1")
        if "build-vocab" in argv:
            paths.append(value["--out"])
        if argv[1:3] == ["data", "prepare"]:
            paths.append(f"{value['--out']}/manifest.json")
    return paths


def _named(command: str) -> set[str]:
    """The paths and file names that a line names (and those it reads unnamed, IMPLIED)."""
    names = set()
    for token in re.split(r"[\s=<>]+", command.split(" #")[0]):
        token = token.strip("\"'")
        if token.startswith(WORK_FOLDERS) or ("." in token and not token.startswith(("-", "."))):
            names.add(token)
    return names.union(*(implied for marker, implied in IMPLIED.items() if marker in command))


def _folder(path: str) -> str:
    """A work folder (the first two parts of a path under one), else the path."""
    return "/".join(path.split("/")[:2]) if path.startswith(WORK_FOLDERS) else path


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def chains(runs: list[str]) -> list[list[str]]:
    """The lines in independent chains, each in the README's order.

    Two lines share a chain when they name one work folder under runs/, exports/ or
    reports/, or one reads a file that an earlier one wrote. A line that writes only under
    data/ (a download, a vocabulary) is not shared: it runs again in each chain that reads
    what it writes.
    """
    provides = {}  # a line that writes only under data/: the folders it writes
    for index, run in enumerate(runs):
        paths = written(run)
        if paths and all(path.startswith("data/") for path in paths):
            provides[index] = {p.rsplit("/", 1)[0] if "." in p else p for p in paths}
    owner: dict[str, int] = {}  # a work folder or a written file: the chain that has it
    members: list[set[int]] = []
    for index, run in enumerate(runs):
        if index in provides:
            continue
        named = {_folder(name) for name in _named(run) if not name.startswith("data/")}
        keys = {n for n in named if n.startswith(WORK_FOLDERS) or n in owner}
        keys |= {_folder(path) for path in written(run)}
        joined = sorted({owner[key] for key in keys if key in owner})
        if not joined:
            joined = [len(members)]
            members.append(set())
        chain = joined[0]
        for other in joined[1:]:  # a line that joins two chains merges them
            members[chain] |= members[other]
            members[other] = set()
            owner.update({key: chain for key, value in owner.items() if value == other})
        members[chain].add(index)
        owner.update(dict.fromkeys(keys, chain))
    for chain in members:
        while True:  # the lines that write what the chain reads under data/, and theirs
            read = {name for i in chain for name in _named(runs[i]) if name.startswith("data/")}
            needed = {
                i for i, out in provides.items() if any(_under(r, o) for r in read for o in out)
            }
            if needed <= chain:
                break
            chain |= needed
    members += [{i} for i in provides if not any(i in chain for chain in members)]
    return [[runs[i] for i in sorted(chain)] for chain in members if chain]


def _write(path: Path, lines: list[str]) -> None:
    text = "".join(line + "\n" for line in lines)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as file:
            file.write(text)
    else:
        path.write_text(text, "utf-8")


def make_files(root: Path, multi30k: Path) -> None:
    """The files the README's commands read, as Multi30k slices under the README's names."""
    en = read_gz_lines(multi30k / "train.en.gz")
    de = read_gz_lines(multi30k / "train.de.gz")
    # (12 test lines: a model trained for seconds writes each to the length limit.)
    test_en = read_gz_lines(multi30k / "test_2016_flickr.en.gz", 12)
    test_de = read_gz_lines(multi30k / "test_2016_flickr.de.gz", 12)
    pairs = {
        "corpus.fr.gz": de[:2000],  # German text, named French: the pair is the suffixes'
        "corpus.en.gz": en[:2000],
        "crawl.en.gz": en[2000:4000] + en[2000:2100] + ["", "http://x.y"],
        "crawl.de.gz": de[2000:4000] + de[2000:2100] + ["Ein Satz.", "http://x.y"],
        "news.en.gz": en[4000:5000],
        "news.de.gz": de[4000:5000],
        "general.en.gz": en[5000:7000],
        "general.de.gz": de[5000:7000],
        "bt.en.gz": en[7000:8000],
        "mono.de.gz": de[7000:8000],
        "train.en.gz": en[8000:10000],
        "train.de.gz": de[8000:10000],
        "all.en.gz": en,
        "all.de.gz": de,
        "train.en": en[:60],
        "train.de": de[:60],
        "mono.de": test_de[:10],
    }
    for name in ("newstest", "test"):
        pairs[f"{name}.en"], pairs[f"{name}.de"] = test_en, test_de
    pairs["newstest.fr"] = test_de
    pairs["test.en.gz"], pairs["test.de.gz"] = test_en, test_de
    pairs["baseline.hyp.de"] = test_de[1:] + test_de[:1]
    pairs["in.en"] = test_en[:5]
    pairs["partial.de"] = [" ".join(line.split()[:2]) for line in test_de[:5]]
    pairs["test.hyp.zh"] = ["一个男人骑自行车。"] * 3
    pairs["ref1.zh"] = ["一个男人在骑自行车。"] * 3
    pairs["ref2.zh"] = ["男人骑车。"] * 3
    for name, lines in pairs.items():
        _write(root / name, lines)


RUNS = [run for run in map(runnable, readme_commands()) if run]
CHAINS = chains(RUNS)


def _chain_id(chain: list[str]) -> str:
    """The chain's last work folder under runs/, else its first line's subcommand."""
    folders = [_folder(n) for run in chain for n in sorted(_named(run)) if n.startswith("runs/")]
    return folders[-1] if folders else "-".join(chain[0].split()[1:3])


def test_the_readme_has_its_examples_and_its_chains_keep_every_line_in_order():
    commands = readme_commands()
    left_out = [command for command in commands if runnable(command) is None]
    assert all(any(m in c for m, _ in LEFT_OUT) for c in left_out)
    assert len(RUNS) >= 30, RUNS  # the README lost its examples?
    assert {run for chain in CHAINS for run in chain} == set(RUNS)
    for chain in CHAINS:
        assert sorted(chain, key=RUNS.index) == chain
    # A line reading what another wrote runs after it, in its chain: the two evaluations
    # of runs/m30k write test.hyp.de, which `translator score` reads.
    scored = next(
        c for c in CHAINS if any(r.startswith("translator score --hyp test.hyp.de") for r in c)
    )
    assert any("--hyp-out test.hyp.de" in run for run in scored)
    assert len(CHAINS) >= 5  # the README's jobs are independent: each fails alone


@dataclasses.dataclass
class Machine:
    """What the chains share, as one user's machine would: the planner's speed cache, and
    the files of the lines that write only under data/ (a download, a vocabulary), which
    run in the first chain that needs them; the others get a copy of what they wrote."""

    root: Path
    data_lines: dict[str, Path] = dataclasses.field(default_factory=dict)

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    def ran(self, run: str, workdir: Path) -> None:
        """Keeps what `run` wrote, if it writes only under data/."""
        paths = written(run)
        if run in self.data_lines or not paths or not all(p.startswith("data/") for p in paths):
            return
        kept = self.data_lines[run] = self.root / f"line-{len(self.data_lines)}"
        _copy(workdir, kept, paths)

    def reuse(self, run: str, workdir: Path) -> bool:
        """Copies what `run` wrote in an earlier chain into `workdir`; False if none ran it."""
        if run not in self.data_lines:
            return False
        _copy(self.data_lines[run], workdir, written(run))
        return True


def _copy(source: Path, destination: Path, paths: list[str]) -> None:
    for path in paths:
        (destination / path).parent.mkdir(parents=True, exist_ok=True)
        if (source / path).is_dir():
            shutil.copytree(source / path, destination / path, dirs_exist_ok=True)
        else:
            shutil.copy2(source / path, destination / path)


@pytest.fixture(scope="module")
def readme_machine(tmp_path_factory) -> Machine:
    return Machine(tmp_path_factory.mktemp("readme-machine"))


@pytest.mark.slow
# One worker runs the chains one after another while the other runs the rest: side by
# side on two cores they ran slower, and the phase with them (bench/RESULTS.md, "The test
# suite's time"). A chain that fails fails alone.
@pytest.mark.xdist_group("readme")
@pytest.mark.parametrize("chain", CHAINS, ids=map(_chain_id, CHAINS))
def test_every_readme_command_runs_as_written(chain, multi30k_dir, tmp_path, readme_machine):
    make_files(tmp_path, multi30k_dir)
    env = {
        **os.environ,
        "TRANSLATOR_DATA_MIRROR": str(multi30k_dir),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        # One machine's speed cache for every chain, as a user's machine keeps one.
        "TRANSLATOR_CACHE_DIR": str(readme_machine.cache),
    }
    for run in chain:
        if "runs/m30k-de-en" in run and not (tmp_path / "runs/m30k-de-en").exists():
            # The README's back-translation model: a run of the other direction, which the
            # README leaves to the reader; the commands only need a model there.
            shutil.copytree(tmp_path / "runs/m30k", tmp_path / "runs/m30k-de-en")
        if readme_machine.reuse(run, tmp_path):
            print(f"$ {run}\n  (its files copied from the chain that ran it)", flush=True)
            continue
        print(f"$ {run}", flush=True)
        started = time.monotonic()
        result = subprocess.run(
            ["bash", "-c", run],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        print(f"  ({time.monotonic() - started:.1f} s)", flush=True)
        assert result.returncode == 0, f"{run}\n{result.stderr[-3000:]}"
        for path in written(run):
            assert (tmp_path / path).exists(), f"{run}: did not write {path}"
        readme_machine.ran(run, tmp_path)
