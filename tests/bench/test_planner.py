"""The planner's trial grid: trials are time-fair, from speeds timed per shape and batch."""

import dataclasses

import pytest

from bench.planner import Cell, speed_key, timed_speeds, trial_updates
from training.planning.rules import SHAPES, Speed

NARROW = SHAPES[0]
# A CPU where a token costs more time in a smaller batch (as measured here).
SPEEDS = {
    "precision": "mixed_bfloat16",
    "speeds": {
        speed_key("narrow", 1024): dataclasses.asdict(Speed(6000.0, 900.0, 1024, True, 10.0)),
        speed_key("narrow", 2048): dataclasses.asdict(Speed(8000.0, 1800.0, 2048, True, 12.0)),
        speed_key("small", 2048): dataclasses.asdict(Speed(3000.0, 1800.0, 2048, True, 15.0)),
    },
}


def test_each_trial_trains_the_cells_minutes_at_its_own_speed():
    cell = Cell(5.0, 3000, "en-de")
    updates = {
        batch: trial_updates(cell, {"shape": NARROW, "batch_tokens": batch}, SPEEDS)
        for batch in (1024, 2048)
    }
    # The same wall time (less each one's start-up), not the same tokens.
    assert updates[1024] * 900.0 / 6000.0 == pytest.approx(300 - 10.0, abs=0.1)
    assert updates[2048] * 1800.0 / 8000.0 == pytest.approx(300 - 12.0, abs=0.2)
    # The smaller batch makes more updates, but of fewer tokens in all.
    assert updates[1024] > updates[2048]
    assert updates[1024] * 900.0 < updates[2048] * 1800.0
    # A larger shape, slower per token, makes fewer updates of the same batch.
    small = trial_updates(cell, {"shape": SHAPES[1], "batch_tokens": 2048}, SPEEDS)
    assert small < updates[2048]


def test_the_plans_table_is_each_shape_at_the_planners_batch():
    table = timed_speeds(SPEEDS)
    assert set(table) == {"narrow", "small"}
    assert table["narrow"].batch_tokens == table["small"].batch_tokens == 2048
    assert table["narrow"].tokens_per_second == 8000.0
