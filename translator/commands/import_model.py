"""`translator import marian`: an OPUS-MT / Marian model as a model directory of ours."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the `import` subcommand and its formats (`marian`)."""
    parser = subparsers.add_parser(
        "import",
        help="import a pretrained model from another toolkit (Marian / OPUS-MT)",
        description="Imports a pretrained model into a model directory that every command "
        "takes: translate, evaluate, score-pairs, export, serve, and train/recipe --init-from.",
    )
    formats = parser.add_subparsers(dest="format", metavar="FORMAT", required=True)
    marian = formats.add_parser(
        "marian",
        help="a Marian transformer: an OPUS-MT model (directory or zip) or MarianMT",
        description=(
            "Reads a Marian transformer as OPUS-MT and the Tatoeba Challenge ship it (a "
            "directory or the zip itself: decoder.yml, the .npz, the .vocab.yml, "
            "source.spm, target.spm) or as Hugging Face stores it (config.json, "
            "model.safetensors, vocab.json, source.spm, target.spm), and writes a model "
            "directory with the same translations and scores as Marian's (checked "
            "against CTranslate2's converter). SentencePiece models are rewritten to our "
            "special ids (0 <pad>, 1 <unk>, 2 <s>, 3 </s>) with the same splits; ids "
            "Marian cannot produce are masked. Options Marian models use are supported: "
            "post- and pre-norm, ReLU/Swish/GELU, embedding LayerNorm, sinusoidal or "
            "learned positions, tied or separate embeddings; anything else is named in "
            "one error line and nothing is written."
        ),
        epilog=(
            "Example: translator import marian opus-2021-02-22.zip --out models/en-de; "
            "then translator translate --model models/en-de --input in.txt. A "
            "multilingual model's target language: translate --target-lang fra "
            "(its >>fra<< token)."
        ),
    )
    marian.add_argument("source", metavar="DIR_OR_ZIP", help="the Marian model to import")
    marian.add_argument("--out", required=True, metavar="DIR", help="model directory to write")
    marian.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Runs the subcommand."""
    import time

    from translator.marian import import_marian

    start = time.monotonic()
    summary = import_marian(args.source, args.out)
    for line in summary.lines():
        print(line)
    print(f"done in {time.monotonic() - start:.1f} s")
    return 0
