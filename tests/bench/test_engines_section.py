"""The engines section: the decoding table and the time to the first translation."""

import argparse
import re

from bench import engines, harness


def test_the_engines_section_holds_the_first_translation_figures(monkeypatch):
    footer = dict(command="python -m bench.engines", date="D", machine="M", load="0.1")
    monkeypatch.setattr(harness, "footer", lambda: footer)
    ours = engines.Row("ours, beam 4 (exact stop)", "tensorflow", engines.BEAM, seconds=2.0)
    theirs = engines.Row("CTranslate2 float32, beam 4", "float32", {}, seconds=1.0)
    ours.tokens = theirs.tokens = 1000
    first = {
        "ours, first run (builds, traces, writes the cache)": 12.0,
        "ours, search cached": 5.2,
        "ours, --no-search-cache": 10.0,
        "CTranslate2 float32": 4.0,
        engines.SERVE: 8.0,
    }
    args = argparse.Namespace(short=False, batch_tokens=4096, repeats=2)
    text = engines.section_markdown(args, 1000, "MODEL", "float32", "T", ours, theirs, 0.1, first)
    assert "| ours, search cached | 5.20 | 1.30x |" in text
    assert "| ours, --no-search-cache | 10.00 | 2.50x |" in text
    assert "| CTranslate2 float32 | 4.00 | 1.00x |" in text
    assert "over CTranslate2: 1.30x** the wall time\n  (goal <= 1.3x: meets)" in text
    assert f"| {engines.SERVE} | 8.00 | 2.00x |" in text
    assert "{first_rounds}" not in text and "3 rounds of the four in turn" in text
    assert "took turns for 3 rounds of such processes" in text
    assert "**ours, beam 4 (exact stop) over CTranslate2 float32 beam 4: 0.50x**" in text
    assert 'against the row "CTranslate2 float32, beam 4")' in text
    assert not re.search(r"[{}]", text), "a field was left unfilled"
    first["ours, search cached"] = 5.3
    text = engines.section_markdown(args, 1000, "MODEL", "float32", "T", ours, theirs, 0.1, first)
    assert "(goal <= 1.3x: misses)" in text


def test_the_ratio_is_taken_against_ctranslate2s_faster_setting():
    table = engines.rows(short=False)
    by_name = {row.name: row for row in table}
    assert by_name[engines.THEIRS_REPLICAS].parallel == engines.REPLICAS
    for row in table:
        row.tokens, row.seconds = 1000, 1.0
    by_name[engines.THEIRS_REPLICAS].seconds = 0.9
    assert engines.their_best(table) is by_name[engines.THEIRS_REPLICAS]
    by_name[engines.THEIRS].seconds = 0.8
    assert engines.their_best(table) is by_name[engines.THEIRS]
    short = engines.rows(short=True)  # no replicas row: the default one
    assert engines.their_best(short).name == engines.THEIRS


def test_a_row_measured_in_several_processes_keeps_its_best_pass(monkeypatch):
    passes = iter([2.0, 1.5, 1.8])  # seconds of the best pass in each child process
    calls = []

    def run_child(module, *arguments):
        calls.append((module, arguments))
        return {"seconds": next(passes), "tokens": 100, "texts": ["t"]}

    monkeypatch.setattr(harness, "run_child", run_child)
    row = engines.Row(engines.TOP, "tensorflow", engines.CT2_RULES)
    for _ in range(3):
        engines.measure_in_child(row, 1, ["--model=M"])
    assert row.seconds == 1.5 and row.tokens == 100 and row.rate == 100 / 1.5
    assert calls == [("engines", ("--row=1", "--model=M"))] * 3
