"""Paragraph mode: a test set joined into paragraphs, translated split and unsplit.

    python -m bench.paragraphs --model runs/m30k --src test_2016_flickr.en.gz \
        --ref test_2016_flickr.de.gz --source-lang en

The sentences are joined in order into paragraphs of 3 to 6 (seeded), each to the next
with one space and left unchanged, the references likewise. Reported: BLEU (sacreBLEU,
13a) of the paragraphs translated with splitting (the default) and without
(`--no-split`), against the joined references; sentence-level BLEU, each sentence
translated alone, on the same sentence pairs; and the splitter's accuracy: paragraphs
split back into exactly their sentences, in all and among those whose sentences all end
in a full stop, question or exclamation mark (a caption without one gives the splitter
nothing to see).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from translator.io import read_lines

END_MARKS = (".", "!", "?")


def paragraphs(
    sources: list[str], references: list[str], seed: int
) -> list[tuple[list[str], list[str]]]:
    """Consecutive sentences in groups of 3 to 6 (the last group may be shorter)."""
    rng = np.random.default_rng(seed)
    groups, start = [], 0
    while start < len(sources):
        size = int(rng.integers(3, 7))
        groups.append((sources[start : start + size], references[start : start + size]))
        start += size
    return groups


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--source-lang", required=True, help="the splitter's language")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    import sacrebleu

    from translator.documents import SentenceSplitter
    from translator.engines import load_translator
    from translator.engines.base import InferenceOptions
    from translator.search import SearchConfig

    sources = [line.rstrip("\n") for line in read_lines(args.src)]
    references = [line.rstrip("\n") for line in read_lines(args.ref)]
    groups = paragraphs(sources, references, args.seed)
    joined = [" ".join(group) for group, _ in groups]
    joined_references = [" ".join(refs) for _, refs in groups]

    exact, ended_exact, ended = _splitter_accuracy(SentenceSplitter(args.source_lang), groups)

    search = SearchConfig()  # beam 4, as the recipe's reports
    options = InferenceOptions(source_lang=args.source_lang)
    rows = []
    for label, lines, split, refs in (
        ("each sentence alone (sentence level)", sources, False, references),
        ("paragraphs, split (the default)", joined, True, joined_references),
        ("paragraphs, unsplit (--no-split)", joined, False, joined_references),
    ):
        translator = load_translator(args.model, search, _with(options, split)).translator
        started = time.monotonic()
        found = translator.search(lines)
        seconds = time.monotonic() - started
        bleu = sacrebleu.corpus_bleu(found.texts, [refs])
        stats = found.stats
        rows.append((label, len(lines), bleu.score, stats.truncated, seconds))
        if split is False and lines is sources:
            texts = found.texts
            rejoined = [" ".join(texts[i] for i in _indices(groups, k)) for k in range(len(groups))]
            rejoined_bleu = sacrebleu.corpus_bleu(rejoined, [joined_references]).score
            rejoined_ended = _bleu(sacrebleu, rejoined, joined_references, ended)
        if split is True:
            split_ended = _bleu(sacrebleu, found.texts, joined_references, ended)
    print(f"{len(sources)} sentences in {len(groups)} paragraphs (seed {args.seed})\n")
    print("| translated | lines | BLEU | truncated | seconds |")
    print("|---|---:|---:|---:|---:|")
    for label, count, bleu, truncated, seconds in rows:
        print(f"| {label} | {count} | {bleu:.2f} | {truncated} | {seconds:.0f} |")
    print(f"| each sentence alone, joined as the paragraphs | {len(groups)} | {rejoined_bleu:.2f} "
          "| | |")  # fmt: skip
    print(f"| the {len(ended)} paragraphs whose sentences end in . ! or ?: split | "
          f"{len(ended)} | {split_ended:.2f} | | |")  # fmt: skip
    print(f"| the same, each sentence alone, joined | {len(ended)} | {rejoined_ended:.2f} | | |")
    print(
        f"\nsplitter: {exact} of {len(groups)} paragraphs split into exactly their sentences "
        f"({100 * exact / len(groups):.1f}%); {ended_exact} of the {len(ended)} whose "
        f"sentences (but the last) end in . ! or ? ({100 * ended_exact / max(len(ended), 1):.1f}%)"
    )
    return 0


def _splitter_accuracy(splitter, groups) -> tuple[int, int, list[int]]:
    """Paragraphs split into exactly their sentences: all of them, and those whose
    sentences (but the last) end in a mark; and which those are."""
    exact = ended_exact = 0
    ended = []
    for index, (group, _) in enumerate(groups):
        paragraph = " ".join(group)
        found = [sentence.strip() for sentence in splitter.split(paragraph) if sentence.strip()]
        exact += found == group
        if all(sentence.rstrip().endswith(END_MARKS) for sentence in group[:-1]):
            ended.append(index)
            ended_exact += found == group
    return exact, ended_exact, ended


def _bleu(sacrebleu, hypotheses: list[str], references: list[str], rows: list[int]) -> float:
    chosen = [hypotheses[row] for row in rows]
    return sacrebleu.corpus_bleu(chosen, [[references[row] for row in rows]]).score


def _with(options, split: bool):
    import dataclasses

    return dataclasses.replace(options, split=split)


def _indices(groups, k: int) -> range:
    start = sum(len(group) for group, _ in groups[:k])
    return range(start, start + len(groups[k][0]))


if __name__ == "__main__":
    raise SystemExit(main())
