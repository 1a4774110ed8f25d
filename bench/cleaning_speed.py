"""Speed and peak memory of `translator data clean` on N synthetic pairs.

    python -m bench.cleaning_speed N [N ...] [--out DIR] [--no-language-check]

Each side is 4 to 20 words drawn from Multi30k's English or German training vocabulary
(so the language check reads them as English and German), one pair in 20 a repeat of an
earlier one. The corpus is written as plain text, then cleaned by the command in a child
process; its wall time and peak RSS (the child's `ru_maxrss`) are printed as a Markdown
row. The digests of the distinct pairs are what grows with N.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.harness import find_data
from translator.io import read_lines

# Lines written per block while generating.
BLOCK = 100_000


def _vocabulary(path: Path) -> np.ndarray:
    words = sorted({w for line in read_lines(path) for w in line.split()})
    return np.array(words, dtype=object)


def write_corpus(out: Path, pairs: int, seed: int = 0) -> tuple[Path, Path]:
    """N synthetic pairs in OUT/synthetic.{en,de} (kept if already there)."""
    data = find_data(None)
    paths = (out / f"synthetic-{pairs}.en", out / f"synthetic-{pairs}.de")
    if all(p.is_file() for p in paths):
        return paths
    rng = np.random.default_rng(seed)
    vocabularies = [_vocabulary(data / name) for name in ("train.en.gz", "train.de.gz")]
    out.mkdir(parents=True, exist_ok=True)
    with open(paths[0], "w", encoding="utf-8") as en, open(paths[1], "w", encoding="utf-8") as de:
        for start in range(0, pairs, BLOCK):
            count = min(BLOCK, pairs - start)
            sides = []
            for vocabulary in vocabularies:
                lengths = rng.integers(4, 21, count)
                words = vocabulary[rng.integers(0, len(vocabulary), int(lengths.sum()))]
                cuts = np.cumsum(lengths)[:-1]
                sides.append([" ".join(w) + " ." for w in np.split(words, cuts)])
            repeats = np.flatnonzero(rng.random(count) < 0.05)
            for i in repeats[repeats > 0]:  # a repeat of an earlier pair of the block
                j = int(rng.integers(0, i))
                sides[0][i], sides[1][i] = sides[0][j], sides[1][j]
            en.write("\n".join(sides[0]) + "\n")
            de.write("\n".join(sides[1]) + "\n")
    return paths


def clean(paths: tuple[Path, Path], extra: list[str]) -> tuple[float, float, str]:
    """Seconds and peak RSS (MiB) of `translator data clean` on the files, and its output."""
    outs = [str(p.with_suffix(p.suffix + ".clean")) for p in paths]
    command = [sys.executable, "-m", "translator", "data", "clean", "--src", str(paths[0])]
    command += ["--tgt", str(paths[1]), "--out-src", outs[0], "--out-tgt", outs[1], *extra]
    command += ["--langs", "en-de"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    for path in outs:
        Path(path).unlink()
    return seconds, max(peak, before) / 1024, result.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", type=int, nargs="+")
    parser.add_argument("--out", type=Path, default=Path("/tmp/cleaning-speed"))
    parser.add_argument("--no-language-check", action="store_true")
    args = parser.parse_args()
    extra = ["--no-language-check"] if args.no_language_check else []
    print("| pairs | language check | seconds | pairs/s | peak RSS (MiB) | kept |")
    print("|---:|---|---:|---:|---:|---:|")
    for size in args.sizes:
        paths = write_corpus(args.out, size)
        seconds, peak, output = clean(paths, extra)
        kept = next(line for line in output.splitlines() if line.strip().startswith("kept"))
        check = "off" if extra else "on"
        print(
            f"| {size:,} | {check} | {seconds:.0f} | {size / seconds:,.0f} | {peak:,.0f} | "
            f"{kept.split()[1]} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
