"""A noisy parallel corpus made from a clean one, seeded, for the cleaning tests.

The noise is what web-crawled corpora hold, added until it is SHARE of the result:

    misaligned     a source with another pair's target
    copy           the source on both sides
    wrong_side     the pair reversed (German on the English side)
    boilerplate    a few web-page lines, each repeated about a thousand times
    truncated      the target cut to its first third
    overlong       the target of four pairs glued together
    broken         mojibake (UTF-8 read as Windows-1252) or a control character

`add_noise` labels each pair with its kind ("clean" for the original pairs). The cleaning
benchmark that used it is retired (bench/RESULTS.md, "Cleaning a noisy corpus").
"""

from __future__ import annotations

import random

# Each kind's share of the noise.
KINDS = {
    "misaligned": 0.30,
    "copy": 0.15,
    "wrong_side": 0.15,
    "boilerplate": 0.20,
    "truncated": 0.05,
    "overlong": 0.05,
    "broken": 0.10,
}
# Web-page lines, as crawls repeat them (the German side a translation).
BOILERPLATE = (
    ("Click here to accept all cookies.", "Klicken Sie hier, um alle Cookies zu akzeptieren."),
    ("Copyright 2024. All rights reserved.", "Copyright 2024. Alle Rechte vorbehalten."),
    ("Sign up for our newsletter!", "Melden Sie sich für unseren Newsletter an!"),
)


def add_noise(
    pairs: list[tuple[str, str]], share: float = 0.3, seed: int = 1
) -> list[tuple[str, str, str]]:
    """The pairs with noise added until it is `share` of the result, shuffled.

    Returns:
        (source, target, kind) triples; kind "clean" for the original pairs.
    """
    rng = random.Random(seed)
    noise = round(len(pairs) * share / (1 - share))
    rows = [(s, t, "clean") for s, t in pairs]
    for kind, part in KINDS.items():
        for _ in range(round(noise * part)):
            rows.append((*_noisy(kind, pairs, rng), kind))
    rng.shuffle(rows)
    return rows


def _noisy(kind: str, pairs: list[tuple[str, str]], rng: random.Random) -> tuple[str, str]:
    source, target = rng.choice(pairs)
    if kind == "misaligned":
        return source, rng.choice(pairs)[1]
    if kind == "copy":
        return source, source
    if kind == "wrong_side":
        return target, source
    if kind == "boilerplate":
        return rng.choice(BOILERPLATE)
    if kind == "truncated":
        words = target.split()
        return source, " ".join(words[: max(1, len(words) // 3)])
    if kind == "overlong":
        return source, " ".join([target, *(rng.choice(pairs)[1] for _ in range(3))])
    if kind == "broken":  # mojibake where the target has a non-ASCII letter to break
        if not target.isascii() and rng.random() < 0.5:
            return source, target.encode("utf-8").decode("cp1252", errors="replace")
        cut = rng.randrange(len(target) + 1)
        return source, target[:cut] + "\x07" + target[cut:]
    raise ValueError(kind)
