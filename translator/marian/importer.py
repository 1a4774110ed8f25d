"""`import_marian`: a Marian model (OPUS-MT or Hugging Face layout) -> our model directory.

Everything is read and checked first (options, parameters, vocabularies, shapes); the
model directory is written last, atomically, so bad input leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from translator.marian.files import LANGUAGE_TOKEN, MarianFiles, MarianImportError, read_model
from translator.marian.options import Architecture, architecture
from translator.marian.vocabulary import IdSpace, check_same_split, id_space, rewrite_sentencepiece

# How many of a vocabulary's pieces the split check joins into test lines.
CHECK_PIECES = 4000


@dataclasses.dataclass(frozen=True)
class ImportSummary:
    """What `import_marian` read and wrote, for the command's report."""

    # The model directory written.
    directory: Path
    # Where the Marian model came from, and its layout ("marian" or "huggingface").
    origin: Path
    layout: str
    # `Architecture.describe()`.
    architecture: str
    # Marian's vocabulary sizes, and ours (source, target).
    marian_vocab_sizes: tuple[int, ...]
    vocab_sizes: tuple[int, int]
    # SentencePiece pieces Marian's vocabulary lacks (read as <unk>, never produced).
    missing_pieces: int
    # (source, target) languages, if the model says.
    languages: tuple[str, str] | None
    # Target-language tokens (`>>fra<<`) of a multilingual model.
    language_tokens: tuple[str, ...]
    # Parameters of the imported model.
    parameters: int

    def lines(self) -> list[str]:
        """The report, a line per fact."""
        languages = " -> ".join(self.languages) if self.languages else "not stated"
        tokens = self.language_tokens
        shown = ", ".join(tokens[:12]) + (
            f" and {len(tokens) - 12} more" if len(tokens) > 12 else ""
        )
        return [
            f"read {self.origin} ({self.layout} layout)",
            f"architecture: {self.architecture}",
            f"vocabulary: Marian {' + '.join(map(str, self.marian_vocab_sizes))} pieces; ours "
            f"{self.vocab_sizes[0]} source, {self.vocab_sizes[1]} target ids "
            f"({self.missing_pieces} SentencePiece pieces Marian reads as <unk>)",
            f"languages: {languages}",
            f"target-language tokens: {shown}" if tokens else "target-language tokens: none",
            f"parameters: {self.parameters:,}",
            f"wrote {self.directory}",
        ]


def _id_spaces(files: MarianFiles) -> tuple[IdSpace, IdSpace, dict[str, bytes]]:
    """Our ids of each side and the rewritten SentencePiece models (vocabulary files)."""
    same_model = files.source_spm == files.target_spm
    if len(files.vocabularies) == 1:
        models = [(files.source_spm, "source.spm")]
        if not same_model:
            models.append((files.target_spm, "target.spm"))
        source = target = id_space(files.vocabularies[0], models)
    else:
        sides = [
            (files.vocabularies[0], [(files.source_spm, "source.spm")]),
            (files.vocabularies[1], [(files.target_spm, "target.spm")]),
        ]
        size = max(len(id_space(vocabulary, models).pieces) for vocabulary, models in sides)
        source, target = (id_space(vocabulary, models, size) for vocabulary, models in sides)
    rewritten = {
        "source": rewrite_sentencepiece(files.source_spm, "source.spm", source),
        "target": rewrite_sentencepiece(files.target_spm, "target.spm", target),
    }
    for side, space in (("source", source), ("target", target)):
        original = files.source_spm if side == "source" else files.target_spm
        check_same_split(original, rewritten[side], f"{side}.spm", _check_lines(space))
    if len(files.vocabularies) == 1 and same_model:
        rewritten = {"spm": rewritten["source"]}
    return source, target, rewritten


def _check_lines(space: IdSpace) -> list[str]:
    """Text made of the vocabulary's own pieces, 20 a line: the split check's input."""
    pieces = [p for p in space.pieces[4 : 4 + CHECK_PIECES] if not LANGUAGE_TOKEN.match(p)]
    words = [p.replace("\u2581", " ") for p in pieces]
    return ["".join(words[i : i + 20]) for i in range(0, len(words), 20)]


def _check_sizes(files: MarianFiles) -> None:
    """Each embedding table has as many rows as its vocabulary has pieces."""
    for names, vocabulary in (
        (("Wemb", "encoder_Wemb"), files.source_vocabulary),
        (("Wemb", "decoder_Wemb"), files.target_vocabulary),
    ):
        table = next((files.params[n] for n in names if n in files.params), None)
        if table is not None and table.shape[0] != len(vocabulary):
            raise MarianImportError(
                f"{files.origin}: the vocabulary has {len(vocabulary)} pieces but the "
                f"embedding {table.shape[0]} rows"
            )
    target = len(files.target_vocabulary)
    for name, axis in (("decoder_ff_logit_out_W", 1), ("decoder_ff_logit_out_Wt", 0)):
        if name in files.params and files.params[name].shape[axis] != target:
            raise MarianImportError(
                f"{files.origin}: {name} has {files.params[name].shape[axis]} outputs, the "
                f"target vocabulary {target} pieces"
            )
    bias = files.params.get("decoder_ff_logit_out_b")
    if bias is not None and bias.size != target:
        raise MarianImportError(
            f"{files.origin}: decoder_ff_logit_out_b has {bias.size} entries, the target "
            f"vocabulary {target} pieces"
        )


def import_marian(path: str | Path, out: str | Path) -> ImportSummary:
    """Imports a Marian model into a model directory every command takes.

    Args:
        path: A Marian model directory or zip (OPUS-MT), or a Hugging Face MarianMT
            directory.
        out: The model directory to write (replaced atomically if it exists).

    Returns:
        What was read and written.

    Raises:
        MarianImportError: naming the missing file, the unsupported option or the
            mismatched size; nothing is written then.
    """
    files = read_model(path)
    arch: Architecture = architecture(files)
    _check_sizes(files)
    source, target, models = _id_spaces(files)
    model = _build(files, arch, source, target)
    _write(
        out,
        files,
        arch,
        model,
        models,
        {"source": source.unknown_ids, "target": target.unknown_ids},
    )
    return ImportSummary(
        directory=Path(out),
        origin=files.origin,
        layout=files.layout,
        architecture=arch.describe(),
        marian_vocab_sizes=tuple(len(v) for v in files.vocabularies),
        vocab_sizes=(len(source.pieces), len(target.pieces)),
        missing_pieces=max(source.missing, target.missing),
        languages=files.languages,
        language_tokens=files.language_tokens,
        parameters=int(sum(np.prod(w.shape) for w in model.weights)),
    )


def _build(files: MarianFiles, arch: Architecture, source: IdSpace, target: IdSpace):
    from translator.config import TransformerConfig
    from translator.marian.weights import set_weights
    from translator.model import Transformer

    config = TransformerConfig(
        source_vocab_size=len(source.pieces), target_vocab_size=len(target.pieces), **arch.fields
    )
    model = Transformer(config)
    model.build()
    set_weights(model, files.params, source, target)
    return model


def _write(
    out,
    files: MarianFiles,
    arch: Architecture,
    model,
    models: dict[str, bytes],
    unknown_ids: dict[str, tuple[int, ...]],
) -> None:
    import json

    from translator.artifacts import METADATA_FILE, MODEL_FILE, VOCAB_DIR
    from translator.io import atomic_directory
    from translator.pipelines.vocab import write_vocabulary

    record = {
        "imported_from": {
            "path": str(files.origin),
            "layout": files.layout,
            "languages": list(files.languages) if files.languages else None,
            "tied_embeddings": arch.tied,
            "marian_options": {k: v for k, v in files.options.items() if not isinstance(v, dict)},
        }
    }
    with atomic_directory(out) as staging:
        write_vocabulary(
            staging / VOCAB_DIR,
            models,
            {"imported_from": str(files.origin), "user_symbols": list(files.language_tokens)},
            unknown_ids,
        )
        model.save(staging / MODEL_FILE)
        text = json.dumps(record, indent=2, default=str) + "\n"
        (staging / METADATA_FILE).write_text(text)
