"""Command-line options (and output) that several commands share, each declared once.

Search option defaults are read from `SearchConfig`, the one place a default is written;
`search_config` turns the parsed options back into one.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from translator.artifacts import model_tags
from translator.config import PRECISIONS
from translator.constants import DEFAULT_PARALLEL_BATCHES, language_tag
from translator.documents import NO_SPLIT_HELP, SOURCE_LANG_HELP
from translator.engines.base import (
    CTRANSLATE2_REPLICAS,
    ENGINES,
    SEARCH_CACHE_ENTRIES,
    InferenceOptions,
)
from translator.evaluation.metrics import CJK_EXTRA, EXTRA_METRICS, Scoring
from translator.evaluation.scoring import DEFAULT_BOOTSTRAP_SAMPLES
from translator.languages import language_pair
from translator.search.config import LENGTH_PENALTY_FORMS, SearchConfig

if TYPE_CHECKING:  # pragma: no cover
    from translator.evaluation import ReportFiles

_DEFAULT = SearchConfig()
_RUN = InferenceOptions()

TOP_BEAM_STOP_HELP = (
    "end a sentence's search as soon as its best candidate of a step ends (the rule of "
    "OpenNMT-py and CTranslate2): fewer decoder steps, but it can return a shorter "
    "translation where a longer one would score higher under the length penalty. Default: "
    "the exact stop, which searches until no unfinished hypothesis can still win"
)


METRICS_HELP = (
    "Scores are sacreBLEU's, set for the target language as `sacrebleu -l SRC-TGT` sets them: "
    "BLEU (cased; tokenized zh, ja-mecab or ko-mecab for a Chinese, Japanese or Korean target, "
    "else 13a), chrF2 and TER (case-insensitive; Asian support for a CJK target), each "
    "printed with its sacreBLEU signature, plus lowercased BLEU and the hypothesis/reference "
    "length ratio. --ref may be given several times: multiple references, as sacreBLEU "
    "takes them. With --compare, sacreBLEU's paired bootstrap "
    "resampling (1000 resamples, seed $SACREBLEU_SEED or 12345) tests the difference to the "
    "other hypotheses: 95% confidence interval of the difference and p-value "
    "(p < 0.05: significant, marked *)."
)


def add_reference_option(parser: argparse.ArgumentParser, aligned_with: str) -> None:
    """--ref FILE, repeatable: one or more reference files."""
    parser.add_argument(
        "--ref",
        required=True,
        action="append",
        metavar="FILE",
        help=f"references, aligned with {aligned_with} line by line (plain/.gz); repeat "
        "--ref for several references of each sentence",
    )


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --langs, --tokenize, --metrics, --report, --compare and --bootstrap-samples."""
    parser.add_argument(
        "-l",
        "--langs",
        metavar="SRC-TGT",
        help="the language pair, as sacreBLEU's -l (e.g. en-zh): the target chooses BLEU's "
        "tokenizer and TER's Asian support (default: the model run's target language, "
        "else none: 13a)",
    )
    parser.add_argument(
        "--tokenize",
        metavar="NAME",
        help="sacreBLEU's BLEU tokenizer, instead of the target language's: 13a, intl, zh, "
        "ja-mecab, ko-mecab, char, none, or spm, flores101, flores200 (these download "
        "their SentencePiece model on first use); ja-mecab and ko-mecab need "
        f'pip install -e ".[{CJK_EXTRA}]"',
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        choices=EXTRA_METRICS,
        default=[],
        help="metrics to add to BLEU, chrF2 and TER: chrf++ is chrF with word bigrams "
        "(sacreBLEU's CHRF(word_order=2))",
    )
    parser.add_argument(
        "--report",
        metavar="DIR",
        help=(
            "also write DIR/report.json (scores, signatures, settings, file sha256s, timing) "
            "and DIR/report.md (scores table, by source length where the sources are known, "
            "comparison, samples, worst sentences by sentence-level chrF) with its PNG "
            "charts (DIR/source-length.png, DIR/bootstrap.png with --compare); DIR is "
            "created if missing"
        ),
    )
    parser.add_argument(
        "--compare",
        metavar="HYP_FILE",
        help="another system's hypotheses of the same sources: paired bootstrap comparison",
    )
    parser.add_argument(
        "--bootstrap-samples",
        type=int,
        default=DEFAULT_BOOTSTRAP_SAMPLES,
        metavar="N",
        help="resamples of the paired bootstrap test (default: %(default)s, as sacreBLEU)",
    )


def scoring_of(args: argparse.Namespace) -> Scoring:
    """The `Scoring` of --langs, --tokenize and --metrics (checked: one error line)."""
    target = language_pair(args.langs)[1] if args.langs else ""
    scoring = Scoring(
        target_lang=target, tokenize=args.tokenize or "", extra_metrics=tuple(args.metrics)
    )
    scoring.check()
    return scoring


def print_report(written: ReportFiles) -> None:
    """Prints what `score` and `evaluate` print: counts, scores, and the report's files."""
    print(written.summary())


def add_model_option(parser: argparse.ArgumentParser) -> None:
    """--model: a model directory or a training run directory."""
    parser.add_argument(
        "--model",
        required=True,
        metavar="DIR",
        help="model directory (model.keras + vocab/), or a training run directory (uses its "
        "final model/)",
    )


def add_search_options(parser: argparse.ArgumentParser, title: str = "search") -> None:
    """The `SearchConfig` options (but n-best, whose meaning differs per command)."""
    search = parser.add_argument_group(title)
    search.add_argument(
        "--beam-size",
        type=int,
        default=_DEFAULT.beam_size,
        metavar="K",
        help=f"hypotheses kept per sentence; 1 = greedy search (default: {_DEFAULT.beam_size})",
    )
    search.add_argument(
        "--length-penalty",
        type=float,
        default=_DEFAULT.length_penalty,
        metavar="ALPHA",
        help="length penalty exponent: hypotheses are ranked by log P / lp(length), with "
        "lp = ((5 + length) / 6) ** ALPHA (GNMT) or length ** ALPHA (see "
        "--length-penalty-form); 0 ranks by log P alone, larger values favour longer outputs "
        f"(default: {_DEFAULT.length_penalty})",
    )
    search.add_argument(
        "--length-penalty-form",
        choices=LENGTH_PENALTY_FORMS,
        default=_DEFAULT.length_penalty_form,
        help="gnmt: ((5 + length) / 6) ** ALPHA (Wu et al. 2016); power: length ** ALPHA "
        "(fairseq, CTranslate2) (default: %(default)s)",
    )
    search.add_argument(
        "--max-length-a",
        type=float,
        default=_DEFAULT.max_length_a,
        metavar="A",
        help="output length limit A * source_tokens + B, in tokens, EOS included "
        f"(default A: {_DEFAULT.max_length_a})",
    )
    search.add_argument(
        "--max-length-b",
        type=int,
        default=_DEFAULT.max_length_b,
        metavar="B",
        help=f"see --max-length-a (default B: {_DEFAULT.max_length_b})",
    )
    search.add_argument(
        "--max-output-length",
        type=int,
        default=_DEFAULT.max_output_length,
        metavar="N",
        help="cap on output tokens, EOS included, whatever the source length "
        f"(default: {_DEFAULT.max_output_length})",
    )
    search.add_argument(
        "--min-length",
        type=int,
        default=_DEFAULT.min_length,
        metavar="N",
        help="tokens before EOS may end a translation; 1 rules out empty translations of "
        f"non-empty lines, 0 lets the model choose (default: {_DEFAULT.min_length})",
    )
    search.add_argument("--top-beam-stop", action="store_true", help=TOP_BEAM_STOP_HELP)
    add_sampling_options(parser)
    search.add_argument(
        "--max-source-length",
        type=int,
        metavar="N",
        help="split a longer sentence again to fit N tokens, EOS included, at the best "
        "boundary N allows, and rejoin its pieces' translations (with --no-split: cut a "
        "longer line, and count it as truncated) "
        "(default: the position table size for learned positions, else 1024)",
    )


def add_sampling_options(parser: argparse.ArgumentParser) -> None:
    """--sampling, --temperature, --seed, --num-samples: draw instead of searching."""
    sampling = parser.add_argument_group(
        "sampling (instead of the search; e.g. for back-translation)"
    )
    sampling.add_argument(
        "--sampling",
        default=_DEFAULT.sampling,
        metavar="RULE",
        help="draw each next token instead of searching: topk:K (among the K most probable; "
        "topk:0 = all) or topp:P (nucleus: the fewest most probable reaching probability P). "
        "--beam-size is then not used (default: search)",
    )
    sampling.add_argument(
        "--temperature",
        type=float,
        default=_DEFAULT.temperature,
        metavar="T",
        help="divide the logits by T before a draw: < 1 sharper, > 1 flatter "
        f"(default: {_DEFAULT.temperature})",
    )
    sampling.add_argument(
        "--seed",
        type=int,
        default=_DEFAULT.seed,
        metavar="S",
        help="the draws' seed: the same seed, input and --batch-tokens give the same output "
        f"(default: {_DEFAULT.seed})",
    )
    sampling.add_argument(
        "--num-samples",
        type=int,
        default=_DEFAULT.num_samples,
        metavar="N",
        help="draws per sentence, sorted by score; with --n-best all are written "
        f"(default: {_DEFAULT.num_samples})",
    )


def add_tag_options(parser: argparse.ArgumentParser) -> None:
    """--tag and --target-lang: what training prepended to a corpus' sources."""
    tags = parser.add_argument_group("tags (a model trained on tagged corpora)")
    choice = tags.add_mutually_exclusive_group()
    choice.add_argument(
        "--tag",
        default="",
        metavar="TAG",
        help="prepend TAG to every source sentence as one piece, as training did for a "
        "tagged corpus (a tag of the model's vocabulary: `build-vocab --user-symbols`)",
    )
    choice.add_argument(
        "--target-lang",
        metavar="XX",
        help="translate into language XX with a multilingual model: the same as --tag <2XX> "
        "(or --tag >>XX<< for an imported OPUS-MT model)",
    )


def tag_of(args: argparse.Namespace) -> str:
    """The tag --tag or --target-lang gives ("" for none), in the form `args.model` uses."""
    if not args.target_lang:
        return args.tag
    return language_tag(args.target_lang, model_tags(getattr(args, "model", None)))


def add_document_options(parser: argparse.ArgumentParser) -> None:
    """--no-split and --source-lang: a line is a paragraph, its sentences translated apart."""
    documents = parser.add_argument_group("documents")
    documents.add_argument("--no-split", dest="split", action="store_false", help=NO_SPLIT_HELP)
    documents.add_argument(
        "--source-lang", default=_RUN.source_lang, metavar="LANG", help=SOURCE_LANG_HELP
    )


def add_batching_options(parser: argparse.ArgumentParser) -> None:
    """How `translate` and `evaluate` batch and run the search (not part of the result)."""
    batching = parser.add_argument_group("batching")
    batching.add_argument(
        "--batch-tokens",
        type=int,
        default=_RUN.batch_tokens,
        metavar="N",
        help="source tokens per batch, padding included; lines are sorted by length into "
        "batches and put back in input order (default: %(default)s)",
    )
    batching.add_argument(
        "--parallel-batches",
        type=int,
        default=_RUN.parallel_batches,
        metavar="N",
        help="batches decoded at once, the translations the same for any N: a batch ends "
        f"in steps over its few longest sentences, which leave cores idle, and another "
        f"batch fills them (default: {DEFAULT_PARALLEL_BATCHES} with our search; with "
        f"ctranslate2, {CTRANSLATE2_REPLICAS}: its N replicas share the cores, so a lone "
        "batch gets a share)",
    )
    batching.add_argument(
        "--engine",
        choices=ENGINES,
        default=_RUN.engine,
        help="what runs the search: tensorflow (our search), or ctranslate2 for a model "
        "written by `translator export --format ctranslate2` (its own search, whose rules "
        "are printed where they differ from these options); auto picks by --model "
        "(default: %(default)s)",
    )
    batching.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=_RUN.precision,
        help="what our search computes in: model, the model's training precision "
        "(bfloat16 for a mixed_bfloat16 model; weights stored in it), or float32. Which is "
        "faster depends on the machine and the model's size (docs/decisions.md, D14) "
        "(default: %(default)s)",
    )
    batching.add_argument(
        "--xla",
        action="store_true",
        help="compile the search with XLA: one compile (seconds) per distinct batch shape, "
        "and finished sentences stay in the batch (static shapes); whether its faster steps "
        "pay for that depends on the model, the search and the machine",
    )
    batching.add_argument(
        "--no-search-cache",
        dest="cache_search",
        action="store_false",
        help="neither reuse nor write the traced search kept in the model directory "
        "(search-cache/, one entry per search setting and precision, the last "
        f"{SEARCH_CACHE_ENTRIES} used kept): by default the first run with some settings "
        "saves it, and later runs start faster",
    )


def inference_options(args: argparse.Namespace) -> InferenceOptions:
    """The `InferenceOptions` of the parsed batching options.

    Raises:
        ConfigError: naming the invalid option.
    """
    return InferenceOptions(
        batch_tokens=args.batch_tokens,
        parallel_batches=args.parallel_batches,
        max_source_length=args.max_source_length,
        xla=args.xla,
        engine=args.engine,
        precision=args.precision,
        tag=tag_of(args),
        cache_search=args.cache_search,
        split=args.split,
        source_lang=args.source_lang,
    )


def search_config(args: argparse.Namespace, n_best: int = 1) -> SearchConfig:
    """The `SearchConfig` of the parsed options.

    Raises:
        ConfigError: naming the invalid option.
    """
    return SearchConfig(
        beam_size=args.beam_size,
        length_penalty=args.length_penalty,
        length_penalty_form=args.length_penalty_form,
        max_length_a=args.max_length_a,
        max_length_b=args.max_length_b,
        max_output_length=args.max_output_length,
        min_length=args.min_length,
        exact_stop=not args.top_beam_stop,
        n_best=n_best,
        sampling=args.sampling,
        temperature=args.temperature,
        seed=args.seed,
        num_samples=args.num_samples,
    )
