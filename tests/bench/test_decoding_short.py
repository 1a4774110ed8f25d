"""A short run of bench/decoding.py, written into a temporary results file."""

import re

import pytest

from bench.harness import parse_targets, read_section

DECODERS = ("naive", "naive, compiled step", "greedy", "beam 4")


@pytest.mark.slow
def test_decoding_benchmark_short_run_writes_its_section(multi30k, tmp_path, capsys):
    data = multi30k
    from bench.decoding import main

    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\nA note by hand.\n")
    assert main(["--short", "--write", "--results", str(results), "--data", str(data)]) == 0

    section = read_section("decoding", results)
    assert section is not None and section.startswith("## Decoding")
    assert "A note by hand." in results.read_text()  # only its own section is replaced
    rates = {}
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if cells[0] in DECODERS and cells[1] == "no":
            rates[cells[0]] = float(cells[5].strip("*").replace(",", ""))
    assert set(rates) == set(DECODERS)
    assert all(rate > 0 for rate in rates.values()), rates
    # Greedy search (cached, in-graph) and the naive decoders (full recompute) agree.
    agree, compared = map(int, re.search(r"same ids\) \| (\d+)/(\d+)", section).groups())
    assert compared > 0 and agree == compared
    assert "Command: `" in section and "Machine: " in section
    # Step counts: greedy returns a token for every step a sentence is in the loop (with
    # compaction); beam search's exact stop can only add steps.
    counts = dict(re.findall(r"\| (greedy|beam 4) \| [\d,]+ \| ([\d.]+) \|", section))
    assert counts["greedy"] == "1.00" and float(counts["beam 4"]) >= 1.0

    targets = parse_targets(capsys.readouterr().out)
    assert len(targets) == 2 and all(target["measured"] > 0 for target in targets)
