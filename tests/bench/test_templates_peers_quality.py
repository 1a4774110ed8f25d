"""The peers and quality sections: the words from their templates, the figures from the runs."""

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from bench import peers, quality
from bench.quality import BudgetRun
from tests.support.bench import COMMAND, DATE, MACHINE

REPO = Path(__file__).resolve().parents[2]
MODULES = {"peers": peers, "quality": quality}
# A field left as written in the template: {name} or {name:spec} (not JSON, as in '{"a": 1}').
UNFILLED = re.compile(r"\{[A-Za-z_]\w*(?:[:!][^{}]*)?\}")


@pytest.fixture(autouse=True)
def _footer(fixed_footer):
    pass


@pytest.fixture
def rendered(monkeypatch):
    """The names of the parts each module renders while the test runs."""
    names = {name: set() for name in MODULES}
    for module in MODULES.values():
        monkeypatch.setattr(module, "TEMPLATE_PARTS", module.render.parts, raising=False)
    for name, module in MODULES.items():

        def spy(part, _render=module.render, _names=names[name], **figures):
            _names.add(part)
            return _render(part, **figures)

        monkeypatch.setattr(module, "render", spy)
    return names


# ---- peers -------------------------------------------------------------------------------


def test_the_peers_section_holds_the_round_figures_and_no_unfilled_field():
    runs = {
        peers.FLOAT32: [
            {"tokens_per_second": 5600.0, "reports": 18, "precision": "float32"},
            {"tokens_per_second": 5800.0, "reports": 17, "precision": "float32"},
        ],
        peers.AUTO: [
            {"tokens_per_second": 7510.4, "reports": 18, "precision": "mixed_bfloat16"},
            {"tokens_per_second": 7544.0, "reports": 17, "precision": "mixed_bfloat16"},
        ],
        peers.PEER: [
            {"tokens_per_second": 4879.0, "reports": 10, "precision": "float32"},
            {"tokens_per_second": 4820.0, "reports": 9, "precision": "float32"},
        ],
    }
    mfu = {peers.FLOAT32: 0.61, peers.AUTO: 0.42, peers.PEER: 0.5}
    text = peers.peers_markdown(runs, mfu, 3.0, 13 * 60 + 5, "mixed_bfloat16")
    assert text.startswith("## Training speed against OpenNMT-tf (`bench/peers.py`)\n\n")
    assert "joint\n8,000-piece" in text and "4,096-token batches, at most\n128 pieces" in text
    assert "take turns, 3 minutes each per round" in text
    assert "- Both in float32, goal >= 1.5x: **misses (1.18x)**." in text
    assert "- Each side's default precision, goal >= 2.0x: **misses (1.55x)**." in text
    head = "| round | ours float32 (target tok/s) | ours mixed_bfloat16 (target tok/s) | "
    assert head + "OpenNMT-tf float32 (target tok/s) | float32 ratio | default ratio |\n" in text
    assert "|---|---|---|---|---|---|\n| 1 | 5,600 (18 reports, float32) | 7,510 (18" in text
    assert "| 2 | 5,800 (17 reports, float32) | 7,544 (17 reports, mixed_bfloat16) | 4,820" in text
    assert "| **mean** | **5,700** | **7,527** | **4,850** | **1.18x** | **1.55x** |" in text
    assert "| **MFU** | 61% | 42% | 50% | | |\n\n- Command:" in text
    assert f"- Command: `{COMMAND}` (13 min)\n- Date: {DATE}\n- Machine: {MACHINE}" in text
    assert text.endswith(f"- Machine: {MACHINE}")
    assert not UNFILLED.search(text), "a field was left unfilled"


def test_a_met_or_missed_peers_target_and_a_float32_only_machine(rendered):
    ours = [{"tokens_per_second": 6000.0, "reports": 3, "precision": "float32"}]
    peer = [{"tokens_per_second": 5000.0, "reports": 4, "precision": "float32"}]
    runs = {peers.FLOAT32: ours, peers.PEER: peer}
    text = peers.peers_markdown(runs, {peers.FLOAT32: 0.6, peers.PEER: 0.5}, 0.5, 30.0, "float32")
    assert "**misses (1.20x)**" in text and "**meets**" not in text
    assert "0.5 minutes each per round" in text and "(0 min)" in text
    assert "| 1 | 6,000 (3 reports, float32) | 5,000 (4 reports, float32) | 1.20x | 1.20x |" in text
    assert "|---|---|---|---|---|\n" in text and "the float32 row is our default too" in text
    assert not UNFILLED.search(text)
    auto = [{"tokens_per_second": 12000.0, "reports": 3, "precision": "mixed_bfloat16"}]
    runs = {peers.FLOAT32: [{**ours[0], "tokens_per_second": 8000.0}], peers.AUTO: auto}
    mfu = {peers.FLOAT32: 0.7, peers.AUTO: 0.5, peers.PEER: 0.5}
    text = peers.peers_markdown({**runs, peers.PEER: peer}, mfu, 3.0, 60.0, "mixed_bfloat16")
    assert "goal >= 1.5x: **meets**" in text and "goal >= 2.0x: **meets**" in text
    assert rendered["peers"] == set(peers.TEMPLATE_PARTS)  # every part filled without error


# ---- quality -----------------------------------------------------------------------------

SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
BUDGETED = {
    "model": {"preset": "small", "overrides": {"d_model": 128, "dropout": 0.1}},
    "optimizer": {"schedule": "budgeted", "peak_learning_rate": 0.005},
}
INVERSE = {"model": {"preset": "base"}, "optimizer": {"schedule": "x", "warmup_steps": 4000}}


def five_minute_plan() -> dict:
    import json

    from training.planning.rules import Budget, CorpusCounts, Speed, make_plan

    counts = CorpusCounts(pairs=29_000, characters=3_820_000, target_tokens=474_000)
    speeds = {"narrow": Speed(7000.0, 1790.0, 2048, True, 25.0)}
    return json.loads(make_plan(counts, Budget(seconds=300), speeds).to_json())


def budget_run(minutes, bleu, history, step, tokens=None, greedy=None, config=BUDGETED, plan=None):
    metadata = {"step": step, "config": config, "best_validation_bleu": 30.914}
    if tokens is not None:
        metadata["target_tokens"] = tokens
    report = {
        "scores": {
            "bleu": {"score": bleu, "signature": SIGNATURE},
            "chrf": {"score": 55.164},
            "ter": {"score": 52.755},
        },
        "sentences": 1000,
        "search": {"beam_size": 4, "length_penalty": 0.6},
        "length": {"ratio": 0.97912},
        "model": {"metadata": metadata},
    }
    greedy_report = None if greedy is None else {"scores": {"bleu": {"score": greedy}}}
    command = ["python", "-m", "translator", "recipe", f"--minutes={minutes:g}"]
    return BudgetRun(minutes, command, report, greedy_report, history, minutes + 0.44, plan)


def test_the_quality_section_holds_each_budget_and_no_unfilled_field():
    runs = [
        budget_run(
            5.0, 31.814, [(1632, 30.914)], 1632, 2_849_000, greedy=30.944, plan=five_minute_plan()
        ),
        budget_run(60.0, 39.79, [(1000, 24.6), (10937, 39.09)], 10937, 36_800_000, 39.46),
    ]
    text = quality.quality_markdown(runs)
    assert text.startswith("## Time to quality (`bench/quality.py`)\n\n")
    assert "then beam 4 on Multi30k test_2016_flickr\n(1000 sentences) EN->DE" in text
    assert f"(`{SIGNATURE}`)" in text
    assert "| budget | test BLEU | target | chrF2 | TER |" in text and "|---|---|---|" in text
    setting = "small (d_model 128, dropout 0.1); peak lr 0.005"
    row = "| 5 min | **31.81** | >= 25 meets | 55.16 | 52.76 | 30.94 | 30.91 | 1,632 | 2.8M |"
    assert f"{row} {setting} |" in text
    assert "| 60 min | **39.79** | >= 38 meets |" in text and "| 10,937 | 36.8M |" in text
    # A planned run says what the plan chose and the rule's reasons; an older run says so.
    assert "- 5 min trains model = narrow; data.pipeline.batch_tokens = 2048;" in text
    assert (
        ", chosen by the planner (training/planning/rules.py): model: the data limit allows" in text
    )
    hand = "- 60 min trains small (d_model 128, dropout 0.1); peak lr 0.005, chosen by a "
    assert hand + "setting set by hand." in text
    assert "validation):\n  24.60 at 1,000, 39.09 at 10,937.\n" in text
    assert 'Search of the test translations: {"beam_size": 4, "length_penalty": 0.6}' in text
    assert "length ratio\n  0.979 (60 minutes).\n- Commands:" in text  # nothing missed
    assert "**Why" not in text
    commands = "`translator recipe --minutes=5` (5.4 min); "
    commands += "`translator recipe --minutes=60` (60.4 min)"
    assert f"- Commands: `{COMMAND}` ran {commands}\n" in text
    assert text.endswith(f"- Date: {DATE}\n- Machine: {MACHINE}")
    assert not UNFILLED.search(text), "a field was left unfilled"


def test_missed_quality_targets_get_a_bullet_each_in_the_list(rendered):
    runs = [
        budget_run(0.3, 1.234, [], 12, config={}),  # no target, nothing recorded
        budget_run(5.0, 21.04, [(1632, 20.5)], 1632, greedy=20.0),  # validated once
        budget_run(15.0, 30.0, [(1000, 24.6), (5085, 29.0), (6000, 29.2)], 6000),  # flat
        budget_run(60.0, 36.9, [(1000, 24.6), (10937, 37.0)], 10937, config=INVERSE),  # rising
    ]
    text = quality.quality_markdown(runs)
    assert "| 0.3 min | **1.23** |   | 55.16 | 52.76 | n/a | 30.91 | 12 | n/a | ? (); " in text
    assert "| 5 min | **21.04** | >= 25 misses |" in text and "| 20.00 |" in text
    assert "| base (); inverse sqrt, warmup 4000 |" in text
    assert "length ratio\n  0.979 (60 minutes).\n- **Why the 5-minute recipe" in text
    why = [line for line in text.splitlines() if line.startswith("- **Why")]
    assert len(why) == 3
    assert why[0] == (
        "- **Why the 5-minute recipe misses by 4.0 BLEU.** It got 1,632 updates; validation "
        "BLEU (greedy): 20.50 at 1,632. It validated once, at the end (the budget goes to "
        "updates)."
    )
    assert why[1].startswith("- **Why the 15-minute recipe misses by 2.0 BLEU.** It got 6,000")
    assert why[1].endswith("the setting (model size, regularization, schedule) is what to change.")
    assert "misses by 1.1 BLEU" in why[2] and "It was still rising at the end" in why[2]
    assert "is what would close the gap.\n- Commands:" in text
    assert not UNFILLED.search(text)
    assert quality.curve([]) == "not recorded"
    table = dataclasses.replace(runs[1], variant=quality.Variant(5.0, table=True))
    de_en = dataclasses.replace(runs[1], variant=quality.Variant(5.0, pair="de-en"))
    quality.quality_markdown(
        [runs[0], budget_run(60.0, 39.0, [], 10, 1_000_000, 38.5), table, de_en]
    )
    assert rendered["quality"] == set(quality.TEMPLATE_PARTS)  # every part filled


def test_the_minutes_table_and_de_en_runs_are_rows_beside_the_plan_without_targets():
    plan_run = budget_run(5.0, 31.0, [(1600, 30.0)], 1600, 2_800_000, plan=five_minute_plan())
    table = dataclasses.replace(
        budget_run(5.0, 30.5, [(1632, 30.1)], 1632), variant=quality.Variant(5.0, table=True)
    )
    de_en = dataclasses.replace(
        budget_run(5.0, 35.0, [(1600, 34.0)], 1600), variant=quality.Variant(5.0, pair="de-en")
    )
    text = quality.quality_markdown([plan_run, table, de_en])
    assert "| 5 min | **31.00** | >= 25 meets |" in text
    assert "| 5 min, minutes table | **30.50** |   |" in text  # no target on the baseline
    assert "| 5 min, DE->EN | **35.00** |   |" in text
    assert "- 5 min, minutes table trains small (" in text and "the minutes table the" in text
    assert quality.plan_and_table([plan_run, table, de_en]) == [(plan_run, table)]
    assert not UNFILLED.search(text)  # every field filled


def test_the_baseline_run_sets_every_planned_value_so_nothing_is_planned_or_timed(tmp_path):
    from training.config import explicit_keys, load_config
    from training.planning.measure import given_settings

    args = argparse.Namespace(short=False)
    command = quality.recipe_command(args, tmp_path, tmp_path, quality.Variant(5.0, table=True))
    sets = [item.removeprefix("--set=") for item in command if item.startswith("--set=")]
    assert "--vocab-size=8000" in command and "--pair=en-de" in command
    given = given_settings(load_config(None, sets), explicit_keys(None, sets), (8000, 8000))
    unset = [name for name, value in dataclasses.asdict(given).items() if value is None]
    assert unset == ["subword_alpha"] and given.subword_nbest == 0  # off: no strength
    assert given.shape.d_model == 128 and given.batch_tokens == 2048 and given.dropout == 0.1
    assert quality.table_setting(60.0) != quality.table_setting(15.0) == quality.table_setting(7)
