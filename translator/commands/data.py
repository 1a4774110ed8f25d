"""`translator data`: fetch a dataset (sha256-verified), or check a parallel corpus."""

from __future__ import annotations

import argparse

from translator.pipelines.download import DATASETS, ENV_MIRROR


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `data` subcommand and its `<dataset>` and `check` subcommands."""
    parser = subparsers.add_parser(
        "data",
        help="fetch a dataset (e.g. multi30k) or check a parallel corpus",
        description=(
            "Fetch a dataset into a directory, verifying every file's sha256, from the\n"
            f"network or from a local mirror directory (--mirror or ${ENV_MIRROR}),\n"
            "or check that two text files form a valid parallel corpus."
        ),
        epilog=(
            "Example: translator data multi30k --dest data/multi30k\n"
            "Offline: translator data multi30k --dest data/multi30k --mirror /path/to/multi30k"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="data_command", metavar="<dataset>|check")
    for spec in DATASETS.values():
        fetch = actions.add_parser(
            spec.name,
            help=f"fetch {spec.name}: {spec.description}",
            description=(
                f"Fetches {spec.description}: {', '.join(f.name for f in spec.files)}. Each "
                "file is checked against its known sha256 and written atomically; files "
                "already present with the right sha256 are kept."
            ),
        )
        fetch.add_argument(
            "--dest",
            default=f"data/{spec.name}",
            metavar="DIR",
            help=f"directory to write the files to (default: data/{spec.name})",
        )
        fetch.add_argument(
            "--mirror",
            metavar="DIR",
            help=(
                "copy byte-identical files from this local directory instead of downloading "
                f"(default: ${ENV_MIRROR} if set; DIR or DIR/{spec.name} holds the files)"
            ),
        )
        fetch.add_argument(
            "--timeout", type=float, default=60.0, help="network timeout in seconds (default: 60)"
        )
        fetch.set_defaults(handler=run_fetch, dataset=spec.name)

    check = actions.add_parser(
        "check",
        help="check a parallel corpus: equal line counts, UTF-8, and what the pipeline skips",
        description=(
            "Streams two aligned text files (plain or gzip) and checks that their line "
            "counts match and every line is UTF-8 (errors name the file and line). With "
            "--vocab, also tokenizes them and counts the pairs the training pipeline would "
            "skip (empty lines, over-long pairs)."
        ),
    )
    check.add_argument("--src", required=True, metavar="FILE", help="source-language file")
    check.add_argument("--tgt", required=True, metavar="FILE", help="target-language file")
    check.add_argument(
        "--vocab", metavar="DIR", help="vocabulary directory (translator build-vocab)"
    )
    check.add_argument(
        "--max-source-length",
        type=int,
        default=256,
        metavar="N",
        help="longest source sequence kept, EOS included (default: 256)",
    )
    check.add_argument(
        "--max-target-length",
        type=int,
        default=256,
        metavar="N",
        help="longest target sequence kept, BOS/EOS included (default: 256)",
    )
    check.set_defaults(handler=run_check)
    parser.set_defaults(handler=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_fetch(args: argparse.Namespace) -> int:
    """Fetches one dataset."""
    from translator.pipelines.download import fetch_dataset, resolve_mirror

    mirror = resolve_mirror(args.mirror, args.dataset)
    where = f"mirror {mirror}" if mirror else "the network"
    print(f"{args.dataset}: fetching into {args.dest} from {where}")
    results = fetch_dataset(
        args.dataset,
        args.dest,
        mirror=args.mirror,
        timeout=args.timeout,
        log=lambda m: print("  " + m),
    )
    print(f"{args.dataset}: {len(results)} files verified in {args.dest}")
    if args.dataset == "multi30k":
        print(
            "next: translator build-vocab "
            f"--src {args.dest}/train.en.gz --tgt {args.dest}/train.de.gz "
            f"--vocab-size 8000 --out {args.dest}/vocab"
        )
    return 0


def run_check(args: argparse.Namespace) -> int:
    """Checks a parallel corpus."""
    from translator.pipelines.corpus import ParallelCorpus

    if not args.vocab:
        pairs = ParallelCorpus(args.src, args.tgt).validate()
        print(f"{args.src} | {args.tgt}: {pairs:,} pairs, line counts equal, all UTF-8")
        return 0
    from translator.pipelines.config import PipelineConfig
    from translator.pipelines.dataset import scan_corpus
    from translator.pipelines.tokenizer import load_vocabulary

    config = PipelineConfig(
        max_source_length=args.max_source_length, max_target_length=args.max_target_length
    )
    stats = scan_corpus(args.src, args.tgt, load_vocabulary(args.vocab), config)
    print(stats.summary())
    return 0
