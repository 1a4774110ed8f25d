"""`translator translate`: translate text lines with a trained model.

Also the helpers `evaluate` shares: loading a `translator.inference.Translator`,
translating with a progress bar. (The options both take are `translator.commands.options`.)
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
from typing import IO, Any

from translator.commands.options import (
    add_batching_options,
    add_model_option,
    add_search_options,
    search_config,
)

# Lines read, translated and written at a time: bounds memory on large inputs while
# leaving plenty of lines to sort by length into well-filled batches.
CHUNK_LINES = 20_000
# The n-best field separator (Moses convention).
SEPARATOR = " ||| "

NBEST_HELP = (
    "n-best output (--n-best K): exactly K lines per input line, best first, each "
    "'INDEX ||| TRANSLATION ||| SCORE' where INDEX is the 0-based input line number and "
    "SCORE is log P(translation) divided by the GNMT length penalty (higher is better). "
    "Slots without a hypothesis (an empty input line, or fewer finished hypotheses than "
    "K) have an empty translation and the score -inf."
)


@dataclasses.dataclass(frozen=True)
class LoadedTranslator:
    """A loaded model directory and its `Translator`."""

    # `translator.artifacts.TrainedModel`.
    trained: Any
    # `translator.inference.Translator`.
    translator: Any
    load_seconds: float
    # Building the search graph, on one dummy sentence (so rates measure decoding only).
    warmup_seconds: float


def load_translator(
    model: str | Path,
    config: Any,
    batch_tokens: int = 4096,
    max_source_length: int | None = None,
    xla: bool = False,
    engine: str = "auto",
    precision: str = "model",
) -> LoadedTranslator:
    """Loads `model`, builds its `Translator` with the search `config` and warms it up.

    Args:
        model: A model or run directory, or a CTranslate2 export.
        config: The `SearchConfig`.
        batch_tokens: Source tokens per batch.
        max_source_length: Cut longer sources (default: the model's limit).
        xla: Compile our search with XLA.
        engine: "auto", "tensorflow" or "ctranslate2" (`options.ENGINES`).
        precision: What our search computes in (`translator.config.PRECISIONS`).

    Raises:
        ModelDirError, PipelineError: for a model directory that cannot be loaded.
        ConfigError: for settings the engine cannot run.
    """
    from translator.inference import Translator

    started = time.monotonic()
    if uses_ctranslate2(model, engine):
        trained, translator = _ctranslate2_translator(
            model, config, batch_tokens, max_source_length, xla, precision
        )
    else:
        from translator.artifacts import load_model_dir

        trained = load_model_dir(model)
        translator = Translator(
            trained.model.for_inference(precision),
            trained.vocabulary,
            config,
            batch_tokens=batch_tokens,
            max_source_length=max_source_length,
            jit_compile=xla,
        )
    loaded = time.monotonic()
    translator.translate(["warm up"])  # traces the search once; later batches reuse it
    return LoadedTranslator(
        trained, translator, loaded - started, warmup_seconds=time.monotonic() - loaded
    )


def uses_ctranslate2(model: str | Path, engine: str) -> bool:
    """Whether `--engine` (and, for auto, what `--model` is) picks CTranslate2."""
    from translator.ctranslate2 import is_ctranslate2_dir

    return engine == "ctranslate2" or (engine == "auto" and is_ctranslate2_dir(model))


def check_model(model: str | Path, engine: str) -> None:
    """Fails fast, before TensorFlow starts, on a --model the engine cannot load."""
    from translator.artifacts import resolve_model_dir
    from translator.ctranslate2 import check_ctranslate2_dir

    if uses_ctranslate2(model, engine):
        check_ctranslate2_dir(model)
    else:
        resolve_model_dir(model)


def _ctranslate2_translator(model, config, batch_tokens, max_source_length, xla, precision):
    """The loaded CTranslate2 export and a `Translator` searching with it."""
    from translator.ctranslate2 import (
        CTranslate2Decoder,
        engine_config,
        load_ctranslate2,
        rule_changes,
    )
    from translator.errors import ConfigError
    from translator.inference import Translator
    from translator.text import default_max_source_length

    if xla:
        raise ConfigError("--xla compiles our TensorFlow search; CTranslate2 has its own")
    if precision != "model":
        raise ConfigError(
            "--precision sets our TensorFlow search's; a CTranslate2 export has the weights "
            "it was written with (translator export --quantization)"
        )
    loaded = load_ctranslate2(model)
    changes = rule_changes(config)
    if changes:
        print(f"ctranslate2 runs {' and '.join(changes)}", file=sys.stderr)
    if max_source_length is None:
        max_source_length = default_max_source_length(loaded.model_config)
    decoder = CTranslate2Decoder(loaded, config)
    translator = Translator(
        None,
        loaded.vocabulary,
        engine_config(config),
        batch_tokens=batch_tokens,
        max_source_length=max_source_length,
        decoder=decoder,
    )
    return loaded, translator


def one_line(text: str) -> str:
    """A translation made safe for line-based output (no line breaks inside)."""
    if "\n" in text or "\r" in text:
        return text.replace("\r", " ").replace("\n", " ")
    return text


@contextlib.contextmanager
def progress_bar(total: int | None, description: str) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr when stderr is a terminal; yields its `update` (or a no-op)."""
    if not sys.stderr.isatty():
        yield lambda n: None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="line", desc=description, file=sys.stderr, leave=False) as bar:
        yield bar.update


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `translate` subcommand."""
    parser = subparsers.add_parser(
        "translate",
        help="translate text, one sentence per line (stdin or a file)",
        description=textwrap.fill(
            width=79,
            text="Translates one sentence per line with beam search (or greedy search with "
            "--beam-size 1). Lines are batched by length and written back in input order, "
            "detokenized, one output line per input line: an empty or whitespace-only input "
            "line gives an empty output line. A progress bar is shown when stderr is a "
            "terminal; a summary (lines, empty, truncated, speed) goes to stderr.",
        ),
        epilog=(
            f"{textwrap.fill(NBEST_HELP, width=79)}\n\n"
            "Examples:\n"
            "  echo 'A man is riding a bike.' | translator translate --model runs/m30k\n"
            "  translator translate --model runs/m30k/model -i test.en.gz -o test.hyp.de\n"
            "  translator translate --model runs/m30k --beam-size 8 --n-best 4 -i in.txt"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_option(parser)
    add_search_options(parser)
    add_batching_options(parser)
    parser.add_argument(
        "--n-best",
        type=int,
        default=1,
        metavar="K",
        help="write the K best translations per line, at most --beam-size (format below)",
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
    target_tokens: int = 0


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    from translator.cli import CommandError

    check_model(args.model, args.engine)  # a wrong --model fails before TensorFlow starts
    total = _count_input_lines(args.input)
    if args.output is not None and not Path(args.output).resolve().parent.is_dir():
        raise CommandError(f"{args.output}: cannot write: its directory does not exist")
    config = search_config(args, n_best=args.n_best)
    loaded = load_translator(
        args.model,
        config,
        args.batch_tokens,
        args.max_source_length,
        args.xla,
        args.engine,
        args.precision,
    )
    totals = _Totals()
    # Someone typing at a terminal gets each line translated as soon as it is entered.
    chunk_lines = 1 if args.input is None and sys.stdin.isatty() else CHUNK_LINES
    started = time.monotonic()
    with (
        _output(args.output) as sink,
        progress_bar(total, "translating") as progress,
    ):
        for chunk in _chunks(_input_lines(args.input), chunk_lines):
            _translate_chunk(loaded.translator, chunk, args.n_best, totals, sink, progress)
    elapsed = time.monotonic() - started
    if not args.quiet:
        rate = totals.lines / elapsed if elapsed > 0 else 0.0
        token_rate = totals.target_tokens / elapsed if elapsed > 0 else 0.0
        print(
            f"translated {totals.lines:,} lines ({totals.empty:,} empty, "
            f"{totals.truncated:,} truncated) in {elapsed:.1f} s: {rate:.1f} lines/s, "
            f"{token_rate:.0f} target tokens/s (model loaded in {loaded.load_seconds:.1f} s, "
            f"search built in {loaded.warmup_seconds:.1f} s)",
            file=sys.stderr,
        )
    return 0


def _translate_chunk(
    translator: Any,
    chunk: list[str],
    n_best: int,
    totals: _Totals,
    sink: IO[bytes],
    progress: Callable[[int], None],
) -> None:
    first = totals.lines  # 0-based index of the chunk's first line in the whole input
    if n_best == 1:
        texts = translator.translate(chunk, progress)
        sink.write("".join(one_line(text) + "\n" for text in texts).encode("utf-8"))
    else:
        rows = []
        for offset, hypotheses in enumerate(translator.translate_n_best(chunk, progress)):
            for k in range(n_best):
                text, score = "", "-inf"
                if k < len(hypotheses):
                    text, score = one_line(hypotheses[k].text), f"{hypotheses[k].score:.4f}"
                rows.append(f"{first + offset}{SEPARATOR}{text}{SEPARATOR}{score}\n")
        sink.write("".join(rows).encode("utf-8"))
    sink.flush()  # a reader of stdout sees each chunk when it is done
    stats = translator.stats
    totals.lines += stats.lines
    totals.empty += stats.empty
    totals.truncated += stats.truncated
    totals.target_tokens += stats.target_tokens


def _count_input_lines(path: str | None) -> int | None:
    """Lines of the input file (for the progress bar); None for stdin."""
    if path is None:
        return None
    from translator.pipelines.corpus import count_lines

    return count_lines(path)


def _input_lines(path: str | None) -> Iterator[str]:
    """Lines of --input (plain or gzip) or of stdin, without line ends."""
    if path is not None:
        from translator.pipelines.corpus import iter_lines

        return iter_lines(path)
    return _stream_lines(sys.stdin.buffer, "<stdin>")


def _stream_lines(stream: IO[bytes], name: str) -> Iterator[str]:
    r"""Lines of a binary stream, read like `translator.pipelines.corpus.iter_lines`.

    A line ends at `\n` and every `\r` is dropped, so files and pipes read alike.
    """
    from translator.pipelines.errors import CorpusError

    for number, raw in enumerate(stream, start=1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        try:
            yield line.replace(b"\r", b"").decode("utf-8")
        except UnicodeDecodeError as error:
            raise CorpusError(
                f"{name}, line {number}: not valid UTF-8 (byte 0x{line[error.start]:02x} at "
                f"byte offset {error.start}); re-encode the input as UTF-8"
            ) from None


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
