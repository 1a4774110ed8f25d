"""Our search against CTranslate2 on the same trained model: speed and BLEU.

    python -m bench.engines --model runs/bench-recipe/run   # writes its RESULTS.md section
    python -m bench.engines --short           # tiny random model, a few sentences

The model is exported with `translator export --format ctranslate2` (float32 and int8)
and every engine translates the same sentences (Multi30k test_2016_flickr, English)
through the same `translator.inference.Translator`: the same tokenization, length-sorted
batches of `--batch-tokens` and detokenization, so the figures differ only by the search.
One process; TensorFlow and CTranslate2 each on every core of the machine (2 here).

Rows: our beam 4 with the exact stop (the default) and with the top-beam stop and the
length penalty length ** 0.6 (the rules CTranslate2 runs), each without and with XLA;
CTranslate2 float32 and int8, beam 4 and greedy; our greedy search. Each engine is
warmed up (XLA compiles, CTranslate2 loads) on the whole set, then times `--repeats`
passes, the engines taking turns each pass; a pass counts with its best time (other
load only ever slows a pass). BLEU is sacreBLEU's default against the references.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/engines.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pipeline import find_data
from bench.results import (
    TEMPLATES,
    bind_template,
    command_line,
    machine_summary,
    report_target,
    today,
    update_section,
)

TEMPLATE = TEMPLATES / "engines.md"
template_parts, render = bind_template(TEMPLATE)
SOURCE, REFERENCE = "test_2016_flickr.en.gz", "test_2016_flickr.de.gz"
# Ours over CTranslate2 float32, beam 4, target tokens/s (issue 16).
RATIO_GOAL = 0.7
# int8 BLEU may lose at most this much against float32.
INT8_BLEU_LOSS = 0.5


@dataclasses.dataclass
class Row:
    """One engine's search and its figures."""

    name: str
    # "tensorflow" or the export's quantization.
    engine: str
    # `SearchConfig` fields.
    search: dict
    xla: bool = False
    # Best pass, seconds; target tokens of a pass; BLEU of the translations.
    seconds: float = float("inf")
    tokens: int = 0
    bleu: float = 0.0
    texts: list[str] = dataclasses.field(default_factory=list)
    # The row whose translations this one is compared with, and the share that are equal.
    compared_with: str = ""
    same: float | None = None

    @property
    def rate(self) -> float:
        """Target tokens per second of the best pass."""
        return self.tokens / self.seconds


BEAM = dict(beam_size=4)
CT2_RULES = dict(beam_size=4, exact_stop=False, length_penalty_form="power")
GREEDY = dict(beam_size=1)


def rows(short: bool) -> list[Row]:
    """The engines and searches measured."""
    ours = [
        Row("ours, beam 4 (exact stop)", "tensorflow", BEAM),
        Row("ours, beam 4 (top-beam stop, length ** 0.6)", "tensorflow", CT2_RULES),
        Row("ours, greedy", "tensorflow", GREEDY),
    ]
    if not short:
        ours += [
            Row("ours, beam 4 (exact stop), XLA", "tensorflow", BEAM, xla=True),
            Row("ours, beam 4 (top-beam stop, length ** 0.6), XLA", "tensorflow", CT2_RULES, True),
        ]
    nearest = {"beam 4": ours[1].name, "greedy": ours[2].name}  # our search, nearest rules
    theirs = [
        Row(f"CTranslate2 {q}, {label}", q, search, compared_with=nearest[label])
        for q in ("float32", "int8")
        for label, search in (("beam 4", CT2_RULES), ("greedy", GREEDY))
    ]
    return ours + theirs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", help="trained model or run directory (default with --short: a tiny random model)"
    )
    parser.add_argument("--short", action="store_true", help="tiny random model, 48 sentences")
    parser.add_argument("--data", help="Multi30k directory (default: the bench's data search)")
    parser.add_argument("--sentences", type=int, help="first N test sentences (default: all)")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="default: %(default)s")
    parser.add_argument("--repeats", type=int, default=2, help="timed passes (default: 2)")
    parser.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="update the results file (default: yes for full runs, no with --short)",
    )
    parser.add_argument("--results", default=None, help="results file (default: bench's)")
    args = parser.parse_args(argv)
    if not args.model and not args.short:
        parser.error("--model is needed (or --short for a tiny random model)")
    if args.short:
        args.sentences, args.repeats = args.sentences or 48, 1
    args.write = not args.short if args.write is None else args.write
    return args


def read_gz(path: Path, count: int | None) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines][:count]


def tiny_random_model(root: Path, data: Path):
    """A tiny random model with a real vocabulary of Multi30k, saved as a model directory."""
    import keras

    from translator import Transformer, TransformerConfig
    from translator.artifacts import save_model_dir
    from translator.pipelines.vocab import build_vocabulary

    vocab = root / "vocab"
    build_vocabulary([data / "train.en.gz"], [data / "train.de.gz"], vocab, vocab_size=1000)
    keras.utils.set_random_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", vocab_size=1000))
    model.build()
    return save_model_dir(root / "model", model, vocab, {"note": "random weights"})


def translators(row: Row, trained, exports: dict, batch_tokens: int):
    """The `Translator` of a row (ours, or through the CTranslate2 export)."""
    from translator.ctranslate2 import CTranslate2Decoder, engine_config, load_ctranslate2
    from translator.inference import Translator
    from translator.search import SearchConfig

    config = SearchConfig(**row.search)
    if row.engine == "tensorflow":
        return Translator(
            trained.model, trained.vocabulary, config, batch_tokens, jit_compile=row.xla
        )
    loaded = load_ctranslate2(exports[row.engine])
    return Translator(
        None,
        loaded.vocabulary,
        engine_config(config),
        batch_tokens,
        max_source_length=1024,
        decoder=CTranslate2Decoder(loaded, config),
    )


def measure(table: list[Row], made: dict, sources: list[str], repeats: int) -> None:
    """Warm-up on the whole set, then `repeats` timed passes, engines taking turns."""
    for row in table:
        made[row.name].translate(sources)
    for _ in range(repeats):
        for row in table:
            translator = made[row.name]
            started = time.perf_counter()
            texts = translator.translate(sources)
            seconds = time.perf_counter() - started
            if seconds < row.seconds:
                row.seconds, row.tokens, row.texts = seconds, translator.stats.target_tokens, texts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import sacrebleu

    from translator.artifacts import load_model_dir
    from translator.ctranslate2 import export_ctranslate2

    needed = (SOURCE, REFERENCE) + (("train.en.gz", "train.de.gz") if not args.model else ())
    data = find_data(args.data, files=needed)
    sources = read_gz(data / SOURCE, args.sentences)
    references = read_gz(data / REFERENCE, args.sentences)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {machine_summary()}; load average {load}")
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as scratch:
        model_dir = args.model or tiny_random_model(Path(scratch), data)
        trained = load_model_dir(model_dir)
        exports = {
            q: export_ctranslate2(trained, Path(scratch) / q, q) for q in ("float32", "int8")
        }
        table = rows(args.short)
        made = {row.name: translators(row, trained, exports, args.batch_tokens) for row in table}
        measure(table, made, sources, args.repeats)
    by_name = {row.name: row for row in table}
    for row in table:
        row.bleu = sacrebleu.corpus_bleu(row.texts, [references]).score
        if row.compared_with:
            pairs = zip(row.texts, by_name[row.compared_with].texts, strict=True)
            row.same = sum(a == b for a, b in pairs) / len(row.texts)
    print(render("table-head") + "\n" + "\n".join(table_row(r) for r in table))

    theirs = by_name["CTranslate2 float32, beam 4"]
    ours = max(
        (r for r in table if r.engine == "tensorflow" and r.search["beam_size"] == 4),
        key=lambda r: r.rate,
    )
    ratio = ours.rate / theirs.rate
    int8_loss = theirs.bleu - by_name["CTranslate2 int8, beam 4"].bleu
    report_target(f"decoding {ours.name} over CTranslate2 float32 beam 4", ratio, RATIO_GOAL, "x")
    if not args.short:  # a random model's BLEU is ~0: its int8 loss says nothing
        report_target(
            "CTranslate2 int8 beam 4 BLEU loss against float32",
            int8_loss,
            INT8_BLEU_LOSS,
            "BLEU",
            higher_is_better=False,
        )
    if args.write:
        section = render(
            "section",
            sentences=len(sources),
            model=str(model_dir),
            batch_tokens=args.batch_tokens,
            repeats=args.repeats,
            table="\n".join(table_row(r) for r in table),
            ours=ours.name,
            ratio=ratio,
            goal=RATIO_GOAL,
            verdict="meets" if ratio >= RATIO_GOAL else "misses",
            int8_loss=int8_loss,
            int8_verdict="within" if int8_loss <= INT8_BLEU_LOSS else "outside",
            int8_goal=INT8_BLEU_LOSS,
            command=command_line(),
            date=today(),
            machine=machine_summary(),
            load=load,
        )
        path = update_section(
            "engines", section, args.results or Path(__file__).with_name("RESULTS.md")
        )
        print(f"wrote the engines section of {path}")
    return 0


def table_row(row: Row) -> str:
    """The table row of one engine and search."""
    same = "" if row.same is None else f"{row.same:.1%} of `{row.compared_with}`"
    figures = dict(name=row.name, rate=row.rate, bleu=row.bleu, seconds=row.seconds, same=same)
    return render("table-row", **figures)


if __name__ == "__main__":
    sys.exit(main())
