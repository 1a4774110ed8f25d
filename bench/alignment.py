"""Word alignments: alignment error rate on a gold German-English set, per decoder layer.

    python -m bench.alignment --model runs/m30k-de-en --gold DIR

DIR holds `de.txt`, `en.txt` (tokenized, a sentence per line) and `gold.txt` (Pharaoh,
1-based, German first; `i-j` sure, `ipj` possible), e.g. the RWTH Europarl set (Vilar et
al. 2006; not redistributable, so not kept here). Each pair is force-decoded German ->
English in the gold set's tokenization (its tokens are our words), and every layer's
heads-averaged attention is read at both steps (`translator.alignment.forced_attention`).
AER = 1 - (|A & S| + |A & P|) / (|A| + |S|) (Och and Ney 2003), over the whole set.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from translator.alignment import SHIFTED, forced_attention, layer_index, word_links
from translator.constants import EOS_ID, PAD_ID


def read_gold(path: Path) -> list[tuple[set, set]]:
    """Per line, (sure, possible) 0-based (German, English) pairs; sure ones are possible."""
    gold = []
    for line in path.read_text("utf-8").splitlines():
        sure, possible = set(), set()
        for link in line.split():
            mark = "p" if "p" in link else "-"
            i, j = (int(value) - 1 for value in link.split(mark))
            possible.add((i, j))
            if mark == "-":
                sure.add((i, j))
        gold.append((sure, possible))
    return gold


def aer(found: list[set], gold: list[tuple[set, set]]) -> tuple[float, float, float]:
    """(AER, precision against possible, recall against sure) over a corpus."""
    hits_sure = hits_possible = size_found = size_sure = 0
    for links, (sure, possible) in zip(found, gold, strict=True):
        hits_sure += len(links & sure)
        hits_possible += len(links & possible)
        size_found += len(links)
        size_sure += len(sure)
    error = 1 - (hits_sure + hits_possible) / (size_found + size_sure)
    return error, hits_possible / max(size_found, 1), hits_sure / max(size_sure, 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a German -> English model directory")
    parser.add_argument("--gold", required=True, type=Path, help="de.txt, en.txt, gold.txt")
    parser.add_argument("--pairs", type=int, default=0, help="the first N pairs (0: all)")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)

    from translator.artifacts import load_model_dir
    from translator.host_text import HostText

    german = (args.gold / "de.txt").read_text("utf-8").splitlines()
    english = (args.gold / "en.txt").read_text("utf-8").splitlines()
    gold = read_gold(args.gold / "gold.txt")
    if args.pairs:
        german, english, gold = german[: args.pairs], english[: args.pairs], gold[: args.pairs]
    trained = load_model_dir(args.model)
    model = trained.model.for_inference()
    vocabulary = trained.vocabulary
    host = HostText(vocabulary.directory, files=vocabulary.files)
    tables = vocabulary.piece_words
    limit = model.config.position_limit or 1024
    depth = len(model.decoder_blocks)
    variants = [(layer, shifted) for layer in range(depth) for shifted in (False, True)]
    found = {variant: [] for variant in [*variants, ("mean", False)]}
    cut = 0
    started = time.monotonic()
    for start in range(0, len(german), args.batch):
        sources = host.encode(german[start : start + args.batch])
        targets = host.encode(english[start : start + args.batch], side="target")
        cut += sum(len(row) >= limit for row in sources + targets)
        sources = [[*row[: limit - 1], EOS_ID] for row in sources]
        targets = [[*row[: limit - 1], EOS_ID] for row in targets]
        source_ids = _padded(sources)
        target_ids = _padded(targets)
        every = {}
        for layer, shifted in variants:
            weights = forced_attention(model, source_ids, target_ids, layer, shifted)
            every[layer, shifted] = np.asarray(weights)
        every["mean", False] = np.mean([every[layer, False] for layer in range(depth)], axis=0)
        for variant, weights in every.items():
            links = np.asarray(word_links(weights, source_ids, target_ids, *tables))
            for row in links:
                found[variant].append({(int(i), int(j)) for i, j in np.argwhere(row)})
    pairs = zip(german, english, strict=True)
    diagonal = [_diagonal(len(de.split()), len(en.split())) for de, en in pairs]
    seconds = time.monotonic() - started
    print(f"{len(german)} pairs, {cut} sides cut at {limit} pieces, {seconds:.0f} s\n")
    print("| decoder layer | step read | AER | precision | recall |")
    print("|---|---|---:|---:|---:|")
    for layer, shifted in [*variants, ("mean", False)]:
        error, precision, recall = aer(found[layer, shifted], gold)
        chosen = (layer, shifted) == (layer_index(depth), SHIFTED)
        step = "the one it is the input of" if shifted else "the one that predicts it"
        label = "all, averaged" if layer == "mean" else f"{layer + 1} of {depth}"
        label += " (chosen)" if chosen else ""
        print(f"| {label} | {step} | {100 * error:.1f}% | {100 * precision:.1f}% "
              f"| {100 * recall:.1f}% |")  # fmt: skip
    error, precision, recall = aer(diagonal, gold)
    print(f"| the diagonal (no model) | | {100 * error:.1f}% | {100 * precision:.1f}% "
          f"| {100 * recall:.1f}% |")  # fmt: skip
    return 0


def _diagonal(source_words: int, target_words: int) -> set[tuple[int, int]]:
    """Target word j to the source word at the same place in its sentence."""
    ratio = source_words / target_words
    return {(min(round(j * ratio), source_words - 1), j) for j in range(target_words)}


def _padded(rows: list[list[int]]) -> np.ndarray:
    width = max(len(row) for row in rows)
    ids = np.full((len(rows), width), PAD_ID, np.int32)
    for index, row in enumerate(rows):
        ids[index, : len(row)] = row
    return ids


if __name__ == "__main__":
    raise SystemExit(main())
