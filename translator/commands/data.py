"""`translator data`: fetch a dataset (sha256-verified), or check a parallel corpus."""

from __future__ import annotations

import argparse

from translator.pipelines.config import PipelineConfig
from translator.pipelines.download import DATASETS, ENV_MIRROR


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `data` subcommand and its `<dataset>` and `check` subcommands."""
    parser = subparsers.add_parser(
        "data",
        help="fetch a dataset (e.g. multi30k), check, prepare or clean a parallel corpus",
        description=(
            "Fetch a dataset into a directory, verifying every file's sha256, from the\n"
            f"network or from a local mirror directory (--mirror or ${ENV_MIRROR}),\n"
            "check that two text files form a valid parallel corpus, prepare one for\n"
            "training (tokenized once), or clean a noisy one."
        ),
        epilog=(
            "Example: translator data multi30k --dest data/multi30k\n"
            "Offline: translator data multi30k --dest data/multi30k --mirror /path/to/multi30k"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="data_command", metavar="<dataset>|check|prepare|clean")
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
    _length_arguments(check)
    check.set_defaults(handler=run_check)
    _register_prepare(actions)
    _register_clean(actions)
    parser.set_defaults(handler=lambda args: _usage(parser))


def _length_arguments(parser: argparse.ArgumentParser) -> None:
    """--max-source-length and --max-target-length: the pipeline's limits, its defaults."""
    defaults = PipelineConfig()
    for side, specials in (("source", "EOS"), ("target", "BOS/EOS")):
        default = getattr(defaults, f"max_{side}_length")
        parser.add_argument(
            f"--max-{side}-length",
            type=int,
            default=default,
            metavar="N",
            help=f"longest {side} sequence kept, {specials} included; the run's "
            f"data.pipeline.max_{side}_length (default: {default})",
        )


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
    from translator.pipelines.vocabulary import load_vocabulary

    config = PipelineConfig(
        max_source_length=args.max_source_length, max_target_length=args.max_target_length
    )
    stats = scan_corpus(args.src, args.tgt, load_vocabulary(args.vocab), config)
    print(stats.summary())
    return 0


def _register_prepare(actions: argparse._SubParsersAction) -> None:
    """Adds `data prepare`: a training corpus tokenized once, for training without text."""
    prepare = actions.add_parser(
        "prepare",
        help="tokenize a training corpus once into id arrays that training reads "
        "without TensorFlow (data.prepared)",
        description=(
            "Runs the training pipeline's tokenizer and filter over two aligned text files "
            "once and writes the kept pairs as memory-mapped id arrays, in shards, with a "
            "manifest (the vocabulary's sha256, the length limits, the counts, the pairs "
            "skipped and why, bucket lengths chosen from the corpus). Training reads it "
            "with numpy alone: set data.prepared=OUT (translator train --set ...). The "
            "recipe prepares its corpus itself when it trains on JAX. A prepared corpus "
            "made with another vocabulary or other length limits is refused."
        ),
        epilog=(
            "Example: translator data prepare --src train.en.gz --tgt train.de.gz "
            "--vocab vocab --out prepared\n"
            "         translator train --run-dir runs/jax --set train.backend=jax "
            "--set data.prepared=prepared"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prepare.add_argument("--src", required=True, metavar="FILE", help="source-language file")
    prepare.add_argument("--tgt", required=True, metavar="FILE", help="target-language file")
    prepare.add_argument(
        "--vocab", required=True, metavar="DIR", help="vocabulary directory (build-vocab)"
    )
    prepare.add_argument(
        "--out", required=True, metavar="DIR", help="the prepared corpus (replaced if present)"
    )
    _length_arguments(prepare)
    prepare.add_argument(
        "--tag", default="", help="prepend this vocabulary tag to every source (e.g. <bt>)"
    )
    prepare.add_argument(
        "--valid",
        nargs=2,
        metavar=("SRC", "TGT"),
        help="also prepare this validation set into OUT/valid (its loss is then computed "
        "without TensorFlow); its sources take --tag too",
    )
    prepare.set_defaults(handler=run_prepare)


def run_prepare(args: argparse.Namespace) -> int:
    """Prepares a training corpus."""
    from pathlib import Path

    from translator.pipelines.prepare import prepare_corpus
    from translator.pipelines.prepared import VALIDATION_DIR
    from translator.pipelines.vocabulary import load_vocabulary

    config = PipelineConfig(
        max_source_length=args.max_source_length, max_target_length=args.max_target_length
    )
    print(f"preparing {args.src} | {args.tgt} -> {args.out}", flush=True)
    vocabulary = load_vocabulary(args.vocab)
    manifest = prepare_corpus(args.src, args.tgt, vocabulary, args.out, config, tag=args.tag)
    print(manifest.summary())
    if args.valid:
        out = Path(args.out) / VALIDATION_DIR
        print(f"preparing the validation set {args.valid[0]} | {args.valid[1]} -> {out}")
        manifest = prepare_corpus(*args.valid, vocabulary, out, config, tag=args.tag)
        print(manifest.summary())
    print(f"{args.out}: train from it with --set data.prepared={args.out}")
    return 0


def _register_clean(actions: argparse._SubParsersAction) -> None:
    """Adds `data clean`, its options read from `CleanConfig`'s defaults."""
    from translator.pipelines.clean import RULES, CleanConfig

    default = CleanConfig()
    clean = actions.add_parser(
        "clean",
        help="clean a noisy parallel corpus: each rule counted, the kept pairs written",
        description=(
            "Streams a parallel corpus once and writes the pairs that break none of these "
            f"rules (each pair counts under the first it breaks): {', '.join(RULES)}. Prints "
            "the pairs kept and removed per rule with a few examples of each, and writes the "
            "same as JSON to OUT_SRC.clean.json. Both outputs appear only when the whole "
            "corpus was read (an interrupted run leaves neither); outputs ending in .gz are "
            "gzipped. Duplicates are found by 8-byte digests, so memory grows with the "
            "number of distinct pairs, not their text."
        ),
        epilog=(
            "Example: translator data clean --src crawl.en.gz --tgt crawl.de.gz "
            "--out-src clean.en.gz --out-tgt clean.de.gz"
        ),
    )
    clean.add_argument("--src", required=True, metavar="FILE", help="source-language file")
    clean.add_argument("--tgt", required=True, metavar="FILE", help="target-language file")
    clean.add_argument("--out-src", required=True, metavar="FILE", help="kept sources")
    clean.add_argument("--out-tgt", required=True, metavar="FILE", help="kept targets")
    clean.add_argument(
        "--langs",
        metavar="SRC-TGT",
        help="the languages, for the language check (default: the --src and --tgt file "
        "suffixes, as in recipe: crawl.en.gz -> en)",
    )
    rules = clean.add_argument_group("rules")
    rules.add_argument(
        "--max-chars",
        type=int,
        default=default.max_characters,
        metavar="N",
        help="too_long: more characters on a side (default: %(default)s)",
    )
    rules.add_argument(
        "--max-words",
        type=int,
        default=default.max_words,
        metavar="N",
        help="too_long: more words on a side; a Chinese or Japanese character counts as "
        "one (default: %(default)s)",
    )
    rules.add_argument(
        "--max-ratio",
        type=float,
        default=default.max_length_ratio,
        metavar="R",
        help="length_ratio: (longer + 1) / (shorter + 1) in words above R (default: %(default)s)",
    )
    rules.add_argument(
        "--min-letters",
        type=float,
        default=default.min_letter_share,
        metavar="SHARE",
        help="few_letters: letters under this share of a side's non-space characters "
        "(default: %(default)s)",
    )
    rules.add_argument("--no-dedup", action="store_true", help="keep exact duplicate pairs")
    rules.add_argument(
        "--dedup-sources",
        action="store_true",
        help="also drop a pair whose source was seen before with another target",
    )
    rules.add_argument(
        "--no-language-check",
        action="store_true",
        help="skip wrong_language (py3langid on each side)",
    )
    rules.add_argument(
        "--min-language-probability",
        type=float,
        default=default.min_language_probability,
        metavar="P",
        help="wrong_language: the expected language's probability under P on a side "
        "(default: %(default)s)",
    )
    clean.add_argument(
        "--errors",
        choices=("strict", "replace"),
        default=default.errors,
        help="invalid UTF-8: strict stops with the file and line; replace reads bad bytes as "
        "U+FFFD, counts those lines and drops their pairs under invalid_text "
        "(default: %(default)s)",
    )
    clean.set_defaults(handler=run_clean)


def run_clean(args: argparse.Namespace) -> int:
    """Cleans a parallel corpus."""
    import json

    from translator.console import progress_bar
    from translator.io import write_atomic
    from translator.languages import language_of, language_pair
    from translator.pipelines.clean import CleanConfig, clean_corpus

    if args.langs:
        source_lang, target_lang = language_pair(args.langs)
    else:
        source_lang, target_lang = language_of(args.src) or "", language_of(args.tgt) or ""
    config = CleanConfig(
        source_lang=source_lang,
        target_lang=target_lang,
        max_characters=args.max_chars,
        max_words=args.max_words,
        max_length_ratio=args.max_ratio,
        min_letter_share=args.min_letters,
        dedup=not args.no_dedup,
        dedup_sources=args.dedup_sources,
        language_check=not args.no_language_check,
        min_language_probability=args.min_language_probability,
        errors=args.errors,
    )
    with progress_bar(None, "cleaning") as progress:
        report = clean_corpus(args.src, args.tgt, args.out_src, args.out_tgt, config, progress)
    write_atomic(f"{args.out_src}.clean.json", json.dumps(report.to_dict(), indent=2) + "\n")
    print(report.summary())
    print(f"report: {args.out_src}.clean.json")
    return 0
