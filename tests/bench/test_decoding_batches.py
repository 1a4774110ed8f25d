"""The decoding benchmark's batches: the library's text path, cut by a token budget."""

import numpy as np

from bench.decoding import PIECES_PER_WORD, VOCAB_SIZE, RandomPieces, make_batches
from translator.constants import EOS_ID, PAD_ID
from translator.text import padded_length

# 60 sentences of 1 to 30 words.
LINES = [" ".join(["word"] * (1 + (i * 7) % 30)) for i in range(60)]


def pieces(line: str) -> int:
    return max(1, round(PIECES_PER_WORD * len(line.split())))


def unpadded(batches) -> list[list[int]]:
    return [[int(i) for i in row if i != PAD_ID] for batch in batches for row in batch]


def test_batches_are_sorted_padded_and_within_the_token_budget():
    batches = make_batches(LINES, RandomPieces(), 1024, batch_tokens=128, count=None)
    assert len(batches) > 5
    rows = unpadded(batches)
    lengths = [len(row) for row in rows]
    # Every sentence once, its random pieces then EOS, shortest first.
    assert sorted(lengths) == lengths == sorted(pieces(line) + 1 for line in LINES)
    assert all(row[-1] == EOS_ID and all(4 <= i < VOCAB_SIZE for i in row[:-1]) for row in rows)
    for batch in batches:
        assert batch.dtype == np.int32
        longest = max(int(np.sum(row != PAD_ID)) for row in batch)
        assert batch.shape[1] == padded_length(longest)  # padded to a multiple of 8
        assert batch.size <= 128 or len(batch) == 1


def test_the_random_sources_are_the_same_every_run_and_count_picks_spread_batches():
    every = make_batches(LINES, RandomPieces(), 1024, batch_tokens=128, count=None)
    again = make_batches(LINES, RandomPieces(), 1024, batch_tokens=128, count=None)
    assert unpadded(every) == unpadded(again)
    two = make_batches(LINES, RandomPieces(), 1024, batch_tokens=128, count=2)
    step = len(every) / 2
    expected = [every[int(step / 2)], every[int(step + step / 2)]]
    assert [b.tolist() for b in two] == [b.tolist() for b in expected]


def test_long_sources_are_cut_to_the_length_limit():
    batches = make_batches(LINES, RandomPieces(), 16, batch_tokens=4096, count=None)
    assert max(len(row) for row in unpadded(batches)) == 16  # 15 pieces + EOS
