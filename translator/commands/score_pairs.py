"""`translator score-pairs`: the model's log P(target | source) of given pairs.

The service is `translator.forced.PairScorer`; this module reads the files (or an n-best
list), writes one line per pair and prints the summary.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time

from translator.commands.options import add_model_option, add_tag_options, tag_of
from translator.constants import DEFAULT_BATCH_TOKENS, NBEST_SEPARATOR

OUTPUT_HELP = (
    "Output: one line per pair, in input order: 'TOTAL<tab>MEAN', the sum of log P over "
    "the target's pieces and EOS (the search's score with --length-penalty 0) and its "
    "per-token mean; with --tokens a third column 'PIECE:LOGP ...'. A pair whose source or "
    "target is blank gets an empty line. With --n-best, each line of the list comes back "
    "with the model's TOTAL appended as one more ' ||| ' field."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `score-pairs` subcommand."""
    parser = subparsers.add_parser(
        "score-pairs",
        help="score given translations with a model: log P(target | source) per line",
        description=textwrap.fill(
            width=79,
            text="Scores each target line given its source line with the model, "
            "teacher-forced (no search): for filtering a corpus by cross-entropy, reranking "
            "n-best lists (--n-best; with --reverse and a target-to-source model, "
            "noisy-channel style), or checking references against the model.",
        ),
        epilog=(
            f"{textwrap.fill(OUTPUT_HELP, width=79)}\n\n"
            "Examples:\n"
            "  translator score-pairs --model runs/m30k --src train.en --tgt train.de > lp.tsv\n"
            "  translator translate --model runs/m30k --n-best 4 -i test.en > nbest.txt\n"
            "  translator score-pairs --model runs/m30k-de-en --reverse --src test.en "
            "--n-best nbest.txt"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_option(parser)
    parser.add_argument("--src", required=True, metavar="FILE", help="sources, one per line")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--tgt", metavar="FILE", help="targets, aligned with --src")
    target.add_argument(
        "--n-best",
        metavar="FILE",
        help="an n-best list 'INDEX ||| TEXT ||| ...' (as `translate --n-best` writes it; "
        "INDEX is the 0-based line of --src): each TEXT is scored as a target",
    )
    parser.add_argument(
        "--reverse",
        action="store_true",
        help="the model translates target to source: score log P(source | target)",
    )
    parser.add_argument(
        "--tokens", action="store_true", help="also write each piece's log P (not with --n-best)"
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=DEFAULT_BATCH_TOKENS,
        metavar="N",
        help="source tokens per batch, padding included (default: %(default)s)",
    )
    add_tag_options(parser)
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    from translator.engines import check_model
    from translator.errors import CommandError
    from translator.evaluation import read_aligned
    from translator.io import read_lines, write_atomic

    if args.batch_tokens < 1:
        raise CommandError(f"--batch-tokens must be >= 1, got {args.batch_tokens}")
    if args.tokens and args.n_best:
        raise CommandError("--tokens and --n-best: choose one")
    check_model(args.model, "tensorflow")
    sources = read_lines(args.src)
    if args.n_best:
        entries = _read_n_best(args.n_best, len(sources), args.src)
        pairs = [(sources[index], text) for index, text, _ in entries]
    else:
        targets = read_aligned(args.tgt, sources, args.src)
        pairs = list(zip(sources, targets, strict=True))
    if args.reverse:
        pairs = [(target, source) for source, target in pairs]

    from translator.forced import PairScorer

    scorer = PairScorer.from_model_dir(args.model, batch_tokens=args.batch_tokens, tag=tag_of(args))
    started = time.monotonic()
    scored = scorer.score([s for s, _ in pairs], [t for _, t in pairs])
    if args.n_best:
        lines = [
            f"{line}{NBEST_SEPARATOR}{'' if score is None else f'{score.total:.4f}'}"
            for (_, _, line), score in zip(entries, scored.scores, strict=True)
        ]
    else:
        lines = [_pair_line(score, args.tokens) for score in scored.scores]
    text = "".join(f"{line}\n" for line in lines)
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    stats = scored.stats
    if not args.quiet:
        print(
            f"scored {stats.pairs - stats.blank:,} of {stats.pairs:,} pairs ({stats.blank:,} "
            f"blank, not scored; {stats.truncated_sources:,} sources and "
            f"{stats.truncated_targets:,} targets cut) in {time.monotonic() - started:.1f} s",
            file=sys.stderr,
        )
    return 0


def _pair_line(score, tokens: bool) -> str:
    if score is None:
        return ""
    line = f"{score.total:.4f}\t{score.mean:.4f}"
    if tokens:
        pairs = zip(score.pieces, score.log_probs, strict=True)
        line += "\t" + " ".join(f"{piece}:{value:.4f}" for piece, value in pairs)
    return line


def _read_n_best(path: str, sources: int, source_path: str) -> list[tuple[int, str, str]]:
    """(index, text, the whole line) of each n-best line; one error line if malformed."""
    from translator.errors import CommandError
    from translator.io import read_lines

    entries = []
    for number, line in enumerate(read_lines(path), start=1):
        fields = line.split(NBEST_SEPARATOR)
        if len(fields) < 2 or not fields[0].strip().isdigit():
            raise CommandError(f"{path}, line {number}: expected 'INDEX ||| TEXT ||| ...'")
        index = int(fields[0])
        if index >= sources:
            raise CommandError(
                f"{path}, line {number}: index {index}, but {source_path} has {sources:,} lines"
            )
        entries.append((index, fields[1], line))
    return entries
