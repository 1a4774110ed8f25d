"""`translator translate`: translate text lines with a trained model.

The service is `translator.engines.load_translator` and its `Translator`; this module reads
lines in chunks, writes them (or the n-best lists) and prints the summary.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from translator.commands.options import (
    add_batching_options,
    add_document_options,
    add_model_option,
    add_search_options,
    add_tag_options,
    inference_options,
    search_config,
)
from translator.console import progress_bar
from translator.constants import NBEST_SEPARATOR
from translator.io import one_line

if TYPE_CHECKING:  # pragma: no cover
    from translator.inference import Translator

# Lines translated at a time: bounds memory, yet fills length-sorted batches well.
CHUNK_LINES = 20_000

NBEST_HELP = (
    "n-best output (--n-best K): exactly K lines per input line, best first, each "
    "'INDEX ||| TRANSLATION ||| SCORE' where INDEX is the 0-based input line number and "
    "SCORE is log P(translation) divided by the GNMT length penalty (higher is better). "
    "Slots without a hypothesis (an empty input line, or fewer finished hypotheses than "
    "K) have an empty translation and the score -inf."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `translate` subcommand."""
    parser = subparsers.add_parser(
        "translate",
        help="translate text, a paragraph per line (stdin or a file)",
        description=textwrap.fill(
            width=79,
            text="Translates a paragraph per line with beam search (or greedy search with "
            "--beam-size 1): its sentences are translated apart and rejoined with the "
            "whitespace between them (--no-split: the line as one segment), and a sentence "
            "longer than the model's limit is split again, so nothing is cut. Sentences are "
            "batched by length and written back in input order, detokenized, one output "
            "line per input line: an empty or whitespace-only input line gives an empty "
            "output line. A progress bar is shown when stderr is a terminal; a summary "
            "(lines, sentences, splits, speed) goes to stderr.",
        ),
        epilog=(
            f"{textwrap.fill(NBEST_HELP, width=79)}\n\n"
            "Examples:\n"
            "  echo 'A man is riding a bike.' | translator translate --model runs/m30k\n"
            "  translator translate --model runs/m30k/model -i test.en.gz -o test.hyp.de\n"
            "  translator translate --model runs/m30k --beam-size 8 --n-best 4 -i in.txt\n"
            "  translator translate --model runs/m30k --sampling topk:10 --seed 7 -i mono.de\n"
            "  translator translate --model runs/m30k -i in.en --prefix-file partial.de\n"
            "  translator translate --model runs/m30k --format html -i page.html -o page.de.html\n"
            "  echo 'A dog runs.' | translator translate --model runs/m30k --alignments\n"
            "      (prints: TRANSLATION ||| 0-0 1-1 2-2, source word - target word)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_option(parser)
    add_search_options(parser)
    add_tag_options(parser)
    add_document_options(parser)
    add_batching_options(parser)
    parser.add_argument(
        "--n-best",
        type=int,
        default=1,
        metavar="K",
        help="write the K best translations per line, at most --beam-size (--num-samples "
        "when sampling) (format below)",
    )
    parser.add_argument(
        "--alignments",
        action="store_true",
        help="append each translation's word alignment to its line, after ' ||| ': "
        "Pharaoh pairs i-j, source word i to target word j, from 0 (a word: a "
        "whitespace-separated token, or a Chinese or Japanese character); read from "
        "the model's cross-attention (with --n-best: a fourth column)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "html"),
        default="text",
        help="text: a paragraph per line (default); html: the input is one HTML page (or "
        "fragment), each block's text translated as a paragraph and the inline markup "
        'put back by the word alignments; code, pre and translate="no" kept as written '
        "(translator/markup.py)",
    )
    parser.add_argument(
        "--prefix-file",
        metavar="FILE",
        help="one target prefix per input line (plain or .gz; an empty line: none): each "
        "translation begins with it and the search continues it (auto-completion)",
    )
    parser.add_argument(
        "-i",
        "--input",
        metavar="FILE",
        help="UTF-8 input, plain or .gz (default: stdin)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help=(
            "output file, gzipped if it ends in .gz; written to a temporary file and "
            "renamed when complete (default: stdout)"
        ),
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no summary on stderr (errors still go there)"
    )
    parser.set_defaults(handler=run)


@dataclasses.dataclass
class _Totals:
    lines: int = 0
    empty: int = 0
    truncated: int = 0
    segments: int = 0
    lines_split: int = 0
    sentences_split: int = 0
    target_tokens: int = 0


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    from translator.engines import check_model, load_translator
    from translator.errors import CommandError

    check_model(args.model, args.engine)  # a wrong --model fails before TensorFlow starts
    if args.format == "html":
        return _run_html(args)
    total = _count_input_lines(args.input)
    if args.output is not None and not Path(args.output).resolve().parent.is_dir():
        raise CommandError(f"{args.output}: cannot write: its directory does not exist")
    config = search_config(args, n_best=args.n_best)
    prefixes = None
    if args.prefix_file is not None:
        from translator.io import count_lines, iter_lines

        if total is not None and (count := count_lines(args.prefix_file)) != total:
            raise CommandError(
                f"--prefix-file {args.prefix_file}: {count:,} lines for the {total:,} lines "
                f"of {args.input}; give one prefix per input line"
            )
        prefixes = iter_lines(args.prefix_file)
    loaded = load_translator(args.model, config, inference_options(args))
    for note in loaded.notes:
        print(note, file=sys.stderr)
    totals = _Totals()
    # Someone typing at a terminal gets each line translated as soon as it is entered.
    chunk_lines = 1 if args.input is None and sys.stdin.isatty() else CHUNK_LINES
    started = time.monotonic()
    with (
        _output(args.output) as sink,
        progress_bar(total, "translating") as progress,
    ):
        for chunk in _chunks(_input_lines(args.input), chunk_lines):
            chunk_prefixes = None if prefixes is None else _take(prefixes, len(chunk), args)
            _translate_chunk(
                loaded.translator,
                chunk,
                args.n_best,
                totals,
                sink,
                progress,
                chunk_prefixes,
                args.alignments,
            )
        if prefixes is not None and next(prefixes, None) is not None:
            raise CommandError(
                f"--prefix-file {args.prefix_file}: more lines than the {totals.lines:,} input "
                "lines; give one prefix per input line"
            )
    elapsed = time.monotonic() - started
    if not args.quiet:
        rate = totals.lines / elapsed if elapsed > 0 else 0.0
        token_rate = totals.target_tokens / elapsed if elapsed > 0 else 0.0
        print(
            f"translated {totals.lines:,} lines ({totals.empty:,} empty, "
            f"{totals.truncated:,} truncated) as {totals.segments:,} segments "
            f"({totals.lines_split:,} lines split into sentences, {totals.sentences_split:,} "
            f"over the length limit split again) in {elapsed:.1f} s: {rate:.1f} lines/s, "
            f"{token_rate:.0f} target tokens/s (model loaded in {loaded.load_seconds:.1f} s, "
            f"search built in {loaded.warmup_seconds:.1f} s)",
            file=sys.stderr,
        )
    return 0


def _run_html(args: argparse.Namespace) -> int:
    """`--format html`: the input as one page, translated with its markup kept."""
    from translator.engines import load_translator
    from translator.errors import CommandError
    from translator.io import open_binary
    from translator.markup import translate_page

    for given, option in ((args.n_best != 1, "--n-best"), (args.prefix_file, "--prefix-file")):
        if given:
            raise CommandError(f"{option} is for --format text; an HTML page has one output")
    if args.alignments:
        raise CommandError("--alignments is for --format text (the page carries its markup)")
    source = sys.stdin.buffer if args.input is None else open_binary(args.input)
    with source:
        raw = source.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        name = args.input or "<stdin>"
        raise CommandError(f"{name}: not UTF-8 text (byte {error.start})") from None
    loaded = load_translator(args.model, search_config(args), inference_options(args))
    totals = _Totals()
    started = time.monotonic()

    def translate(paragraphs: list[str]) -> list[tuple[str, str]]:
        found = loaded.translator.search(paragraphs, alignments=True)
        _count(totals, found.stats)
        return [(h[0].text, h[0].alignment or "") if h else ("", "") for h in found.hypotheses]

    page, repairs = translate_page(text, translate)
    with _output(args.output) as sink:
        sink.write(page.encode("utf-8"))
    if repairs:
        print(f"--format html: repaired the page as a browser reads it: {'; '.join(repairs)}",
              file=sys.stderr)  # fmt: skip
    if not args.quiet:
        elapsed = time.monotonic() - started
        print(
            f"translated an HTML page of {totals.lines:,} blocks as {totals.segments:,} "
            f"segments ({totals.truncated:,} truncated) in {elapsed:.1f} s",
            file=sys.stderr,
        )
    return 0


def _count(totals: _Totals, stats) -> None:
    totals.lines += stats.lines
    totals.empty += stats.empty
    totals.truncated += stats.truncated
    totals.segments += stats.segments
    totals.lines_split += stats.lines_split
    totals.sentences_split += stats.sentences_split
    totals.target_tokens += stats.target_tokens


def _translate_chunk(
    translator: Translator,
    chunk: list[str],
    n_best: int,
    totals: _Totals,
    sink: IO[bytes],
    progress: Callable[[int], None],
    prefixes: list[str] | None = None,
    alignments: bool = False,
) -> None:
    first = totals.lines  # 0-based index of the chunk's first line in the whole input
    translations = translator.search(chunk, progress, prefixes, alignments)
    rows = []
    for offset, hypotheses in enumerate(translations.hypotheses):
        for k in range(n_best):
            text, score, pairs = "", "-inf", ""
            if k < len(hypotheses):
                text, score = one_line(hypotheses[k].text), f"{hypotheses[k].score:.4f}"
                pairs = hypotheses[k].alignment or ""
            columns = [text] if n_best == 1 else [str(first + offset), text, score]
            if alignments:
                columns.append(pairs)
            rows.append(NBEST_SEPARATOR.join(columns) + "\n")
    sink.write("".join(rows).encode("utf-8"))
    sink.flush()  # a reader of stdout sees each chunk when it is done
    _count(totals, translations.stats)


def _take(lines: Iterator[str], count: int, args: argparse.Namespace) -> list[str]:
    """The next `count` prefixes, or one error line if the prefix file ends first."""
    from translator.errors import CommandError

    taken = [line for _, line in zip(range(count), lines, strict=False)]
    if len(taken) < count:
        raise CommandError(
            f"--prefix-file {args.prefix_file}: fewer lines than the input; give one prefix "
            "per input line"
        )
    return taken


def _count_input_lines(path: str | None) -> int | None:
    """Lines of the input file (for the progress bar); None for stdin."""
    if path is None:
        return None
    from translator.io import count_lines

    return count_lines(path)


def _input_lines(path: str | None) -> Iterator[str]:
    """Lines of --input (plain or gzip) or of stdin, without line ends."""
    from translator.io import iter_lines, stream_lines

    return stream_lines(sys.stdin.buffer, "<stdin>") if path is None else iter_lines(path)


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[IO[bytes]]:
    """A binary sink: stdout, or a file that appears only once completely written."""
    if path is None:
        sys.stdout.flush()
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    from translator.io import atomic_file

    with atomic_file(path, compress=path.endswith(".gz")) as sink:
        yield sink
