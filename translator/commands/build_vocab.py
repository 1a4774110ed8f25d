"""`translator build-vocab`: train SentencePiece model(s) and write a vocabulary directory."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `build-vocab` subcommand."""
    # Long but flat: one declaration per option, in the order `--help` lists them.
    from translator.pipelines.vocab import (
        DEFAULT_CHARACTER_COVERAGE,
        DEFAULT_MAX_SENTENCES,
        DEFAULT_NUM_THREADS,
        DEFAULT_SEED,
    )

    parser = subparsers.add_parser(
        "build-vocab",
        help="train SentencePiece vocabularies (joint or separate) from text files",
        description=(
            "Trains SentencePiece (unigram or BPE) on the given files, streamed, and writes a "
            "vocabulary directory: the .model file(s), a .vocab listing and vocab.json "
            "(type, size, sha256). Special ids: 0 <pad>, 1 <unk>, 2 <s> (BOS), 3 </s> (EOS). "
            "No Unicode normalization (text round-trips except runs of spaces); unseen "
            "characters fall back to bytes. Same input and options give a byte-identical model."
        ),
        epilog=(
            "Example: translator build-vocab --src data/multi30k/train.en.gz "
            "--tgt data/multi30k/train.de.gz --vocab-size 8000 --out data/multi30k/vocab"
        ),
    )
    parser.add_argument(
        "--src",
        required=True,
        nargs="+",
        metavar="FILE",
        help="source-language text file(s), plain or .gz",
    )
    parser.add_argument(
        "--tgt",
        required=True,
        nargs="+",
        metavar="FILE",
        help="target-language text file(s), plain or .gz",
    )
    parser.add_argument(
        "--vocab-size",
        required=True,
        type=int,
        metavar="N",
        help="ids per model, the 4 specials and 256 byte pieces included (e.g. 8000 for Multi30k)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="vocabulary directory to write")
    parser.add_argument(
        "--model-type",
        choices=("unigram", "bpe"),
        default="unigram",
        help="SentencePiece algorithm (default: unigram)",
    )
    sharing = parser.add_mutually_exclusive_group()
    sharing.add_argument(
        "--joint",
        dest="joint",
        action="store_true",
        default=True,
        help="one model for source and target, for shared embeddings (default)",
    )
    sharing.add_argument(
        "--separate", dest="joint", action="store_false", help="one model per language"
    )
    parser.add_argument(
        "--character-coverage",
        type=float,
        default=DEFAULT_CHARACTER_COVERAGE,
        metavar="F",
        help=f"fraction of characters with their own piece (default: {DEFAULT_CHARACTER_COVERAGE})",
    )
    parser.add_argument(
        "--no-byte-fallback",
        dest="byte_fallback",
        action="store_false",
        help="map unseen characters to <unk> instead of UTF-8 byte pieces",
    )
    parser.add_argument(
        "--max-sentences",
        type=int,
        default=DEFAULT_MAX_SENTENCES,
        metavar="N",
        help=(
            "train on a seeded sample of at most N sentences per model "
            f"(default: {DEFAULT_MAX_SENTENCES:,})"
        ),
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"sampling seed (default: {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_NUM_THREADS,
        metavar="N",
        help=(
            "trainer threads; part of the settings, changes the model "
            f"(default: {DEFAULT_NUM_THREADS})"
        ),
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a vocabulary already in --out"
    )
    parser.add_argument(
        "--user-symbols",
        type=_symbols,
        default=(),
        metavar="TAG[,TAG...]",
        help="tags kept as one piece each, e.g. <2de>,<2en>,<bt>: what a training corpus' "
        "`tag` or `translate --tag` prepends to the sources (recorded in vocab.json)",
    )
    parser.set_defaults(handler=run)


def _symbols(text: str) -> tuple[str, ...]:
    """`--user-symbols`: comma-separated, no blanks, no duplicates."""
    symbols = tuple(symbol.strip() for symbol in text.split(","))
    if any(not symbol or " " in symbol for symbol in symbols):
        raise argparse.ArgumentTypeError(f"expected TAG[,TAG...] without spaces, got {text!r}")
    if len(set(symbols)) != len(symbols):
        raise argparse.ArgumentTypeError(f"a tag is repeated in {text!r}")
    return symbols


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    import time

    from translator.pipelines.vocab import build_vocabulary

    kind = "joint" if args.joint else "separate"
    print(f"training {kind} {args.model_type} vocabulary of {args.vocab_size} ids ...")
    start = time.monotonic()
    metadata = build_vocabulary(
        args.src,
        args.tgt,
        args.out,
        vocab_size=args.vocab_size,
        model_type=args.model_type,
        joint=args.joint,
        character_coverage=args.character_coverage,
        byte_fallback=args.byte_fallback,
        max_sentences=args.max_sentences,
        seed=args.seed,
        num_threads=args.threads,
        user_symbols=args.user_symbols,
        overwrite=args.overwrite,
    )
    elapsed = time.monotonic() - start
    print(f"wrote {args.out} in {elapsed:.1f} s:")
    models = {
        metadata.source_model: metadata.source_sha256,
        metadata.target_model: metadata.target_sha256,
    }
    for name, sha256 in models.items():
        print(f"  {name}  sha256 {sha256}")
    print("  vocab.json" + (f" (tags: {', '.join(metadata.tags)})" if metadata.tags else ""))
    return 0
