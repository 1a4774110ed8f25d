"""Vocabularies: training SentencePiece models, writing and loading vocabulary directories.

Every model trained here has the special ids of `translator.constants` (PAD=0, UNK=1,
BOS=2, EOS=3); `load_vocabulary` checks it.

A vocabulary directory, as written by `build_vocabulary` (`translator build-vocab`):

    vocab.json            metadata: model type, size, joint, sha256 of each .model file,
                          the training settings; written last, so its presence means the
                          directory is complete
    spm.model, spm.vocab  joint vocabulary (source and target share one model), or
    source.model, source.vocab, target.model, target.vocab   separate vocabularies

`.vocab` files list `piece<TAB>score` per id, for people; the `.model` files are what is
loaded.

This module builds vocabularies and imports neither TensorFlow nor tensorflow_text, so
`translator build-vocab` starts fast; loading one into tokenizers is
`translator.pipelines.tokenizer.load_vocabulary`.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from translator.constants import (
    BOS_ID,
    BOS_PIECE,
    EOS_ID,
    EOS_PIECE,
    PAD_ID,
    PAD_PIECE,
    SPECIAL_IDS,
    UNK_ID,
    UNK_PIECE,
)
from translator.io import sha256_bytes, write_atomic
from translator.pipelines.errors import CorpusError, VocabularyError

METADATA_FILE = "vocab.json"
METADATA_FORMAT = 1
MODEL_TYPES: tuple[str, ...] = ("unigram", "bpe")

# Defaults of `train_sentencepiece`, fixed (not derived from the machine) because the
# trained model depends on them: same input + same settings = byte-identical model.
DEFAULT_SEED = 1234
# SentencePiece's unigram trainer gives different pieces with different thread counts,
# so the count is a setting, not `os.cpu_count()`.
DEFAULT_NUM_THREADS = 4
# SentencePiece holds its training sentences in memory; above this many it draws a
# seeded random sample, so a corpus larger than memory still trains.
DEFAULT_MAX_SENTENCES = 5_000_000
# SentencePiece's default: the rarest 0.05% of characters get no piece of their own and,
# with byte fallback, are spelled as UTF-8 bytes.
DEFAULT_CHARACTER_COVERAGE = 0.9995


def train_sentencepiece(
    sentences: Iterable[str],
    *,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = DEFAULT_CHARACTER_COVERAGE,
    byte_fallback: bool = True,
    max_sentences: int = DEFAULT_MAX_SENTENCES,
    seed: int = DEFAULT_SEED,
    num_threads: int = DEFAULT_NUM_THREADS,
    user_symbols: Sequence[str] = (),
) -> bytes:
    """Trains one SentencePiece model from streamed sentences.

    Settings, and why:

    * Special ids PAD=0, UNK=1, BOS=2, EOS=3 (pieces `<pad>`, `<unk>`, `<s>`, `</s>`):
      padding is id 0 so zero-filled tensors are padding.
    * `normalization_rule_name="identity"` instead of SentencePiece's default `nmt_nfkc`:
      NFKC rewrites characters (ligatures, full-width forms, superscripts, `…` to `...`),
      so detokenized output would differ from the reference text BLEU is scored against.
      Corpora are normally NFC already, which identity keeps. Only whitespace is still
      normalized (`remove_extra_whitespaces`): leading, trailing and repeated spaces are
      dropped, which is the one expected difference in `detokenize(tokenize(line))`.
    * `byte_fallback=True`: characters without a piece become UTF-8 byte pieces instead of
      UNK, so any text round-trips (256 ids of the vocabulary go to the bytes).
    * Determinism: fixed seed, fixed thread count, and sampling (`input_sentence_size`)
      only when there are more than `max_sentences` sentences; then the sample is drawn
      with the seed. The same sentences in the same order give a byte-identical model.

    Args:
        sentences: Training text, one sentence per item, streamed (an iterator is fine;
            empty strings are ignored by SentencePiece).
        vocab_size: Number of ids including the four specials (and 256 bytes if
            `byte_fallback`).
        model_type: "unigram" (Kudo 2018, SentencePiece's default) or "bpe".
        character_coverage: Fraction of characters that get their own piece.
        byte_fallback: Spell pieceless characters as bytes instead of UNK.
        max_sentences: Train on a seeded sample of this many sentences at most.
        seed: Seed of SentencePiece's random generator (used by the sampling).
        num_threads: Trainer threads; part of the settings (changes the model).
        user_symbols: Strings kept as one piece each wherever they occur, e.g. the tags
            `<2de>` or `<bt>` that training prepends to a corpus' sources.

    Returns:
        The serialized model (the bytes of a `.model` file).

    Raises:
        VocabularyError: for invalid settings, or when SentencePiece cannot reach the
            vocabulary size on this data (the message says what to change).
        CorpusError: from `sentences`, when it reads a broken file.
    """
    # Over 60 lines for its docstring: each setting and why it is fixed.
    _check_settings(vocab_size, model_type, byte_fallback)
    options = _trainer_options(
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        max_sentences=max_sentences,
        num_threads=num_threads,
        user_symbols=tuple(user_symbols),
    )
    return _run_trainer(sentences, options, seed)


def _check_settings(vocab_size: int, model_type: str, byte_fallback: bool) -> None:
    """Rejects a model type or vocabulary size that SentencePiece cannot train.

    Args:
        vocab_size: Ids asked for, specials (and bytes) included.
        model_type: The SentencePiece model type.
        byte_fallback: Whether 256 ids go to the byte pieces.

    Raises:
        VocabularyError: for an unknown model type, or a size that the specials (and
            the byte pieces) alone fill.
    """
    if model_type not in MODEL_TYPES:
        raise VocabularyError(f"model type must be one of {MODEL_TYPES}, got {model_type!r}")
    minimum = 4 + (256 if byte_fallback else 0) + 1
    if vocab_size < minimum:
        raise VocabularyError(
            f"vocab size {vocab_size} is too small: the specials"
            f"{' and the 256 byte pieces' if byte_fallback else ''} alone take {minimum - 1}"
        )


def _trainer_options(
    *,
    vocab_size: int,
    model_type: str,
    character_coverage: float,
    byte_fallback: bool,
    max_sentences: int,
    num_threads: int,
    user_symbols: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The `SentencePieceTrainer.train` keywords: the settings and the fixed choices.

    The fixed choices (special ids, identity normalization, sampling) are explained in
    `train_sentencepiece`.

    Args:
        vocab_size: See `train_sentencepiece`.
        model_type: See `train_sentencepiece`.
        character_coverage: See `train_sentencepiece`.
        byte_fallback: See `train_sentencepiece`.
        max_sentences: See `train_sentencepiece`.
        num_threads: See `train_sentencepiece`.
        user_symbols: See `train_sentencepiece`.

    Returns:
        The keywords, but for the sentence iterator and the model writer.
    """
    return dict(
        user_defined_symbols=list(user_symbols),
        model_type=model_type,
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        normalization_rule_name="identity",
        remove_extra_whitespaces=True,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        pad_piece=PAD_PIECE,
        unk_piece=UNK_PIECE,
        bos_piece=BOS_PIECE,
        eos_piece=EOS_PIECE,
        input_sentence_size=max_sentences,
        shuffle_input_sentence=True,
        num_threads=num_threads,
        minloglevel=2,  # errors only; SentencePiece's INFO log is thousands of lines
    )


def _run_trainer(sentences: Iterable[str], options: dict[str, Any], seed: int) -> bytes:
    """Runs SentencePiece's trainer on the streamed sentences, seeded.

    Args:
        sentences: Training text, one sentence per item.
        options: `_trainer_options`.
        seed: Seed of SentencePiece's random generator.

    Returns:
        The serialized model.

    Raises:
        VocabularyError: when SentencePiece fails (with a hint for a size too high).
        CorpusError: (or any error) raised by `sentences` itself, as it was raised.
    """
    import sentencepiece as spm

    # The iterator is consumed inside SentencePiece's C++ code; an exception raised there
    # would surface as a generic error, so keep ours and re-raise it after.
    failure: list[BaseException] = []

    def guarded(items: Iterable[str]) -> Iterator[str]:
        try:
            yield from items
        except Exception as error:
            failure.append(error)
            raise

    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=guarded(sentences), model_writer=model, **options
        )
    except Exception as error:
        if failure:
            raise failure[0] from None
        message, supported = str(error), None
        if "Vocabulary size too high" in message or "vocab_size" in message:
            message += " (lower --vocab-size, or train on more text)"
            most = re.search(r"value <= (\d+)", message)  # SentencePiece's own words
            supported = int(most.group(1)) if most else None
        raise VocabularyError(f"SentencePiece training failed: {message}", supported) from error
    return model.getvalue()


@dataclasses.dataclass(frozen=True)
class VocabularyMetadata:
    """What `vocab.json` records about a vocabulary directory."""

    # "unigram" or "bpe".
    model_type: str
    # Ids per model, specials included (both models have this size when separate).
    vocab_size: int
    # One model shared by source and target.
    joint: bool
    # File names (inside the directory) of the source and target models; equal if joint.
    source_model: str
    target_model: str
    # Hex sha256 of those files; checked by `load_vocabulary`.
    source_sha256: str
    target_sha256: str
    # The training settings and inputs (for the record; not needed to load).
    training: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Per side ("source", "target"), ids that tokenizing gives as UNK: pieces an imported
    # model's network has no row for (`SentencePieceTokenizer`). Empty when trained here.
    unknown_ids: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    @property
    def tags(self) -> tuple[str, ...]:
        """The user symbols it was built with: tags a corpus or a request may carry."""
        return tuple(self.training.get("user_symbols", ()))

    def to_json(self) -> str:
        """The `vocab.json` text."""
        data = {
            "format": METADATA_FORMAT,
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "joint": self.joint,
            "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
            "models": {
                "source": {"file": self.source_model, "sha256": self.source_sha256},
                "target": {"file": self.target_model, "sha256": self.target_sha256},
            },
            "training": self.training,
        }
        if any(self.unknown_ids.values()):
            data["read_as_unknown"] = {side: list(ids) for side, ids in self.unknown_ids.items()}
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str, *, origin: str = METADATA_FILE) -> VocabularyMetadata:
        """Parses `vocab.json` text; `origin` names the file in errors."""
        try:
            data = json.loads(text)
            if data.get("format") != METADATA_FORMAT:
                raise VocabularyError(
                    f"{origin}: unsupported format {data.get('format')!r} "
                    f"(expected {METADATA_FORMAT})"
                )
            specials = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
            if data["special_ids"] != specials:
                raise VocabularyError(f"{origin}: special ids {data['special_ids']} != {specials}")
            return cls(
                model_type=data["model_type"],
                vocab_size=int(data["vocab_size"]),
                joint=bool(data["joint"]),
                source_model=data["models"]["source"]["file"],
                target_model=data["models"]["target"]["file"],
                source_sha256=data["models"]["source"]["sha256"],
                target_sha256=data["models"]["target"]["sha256"],
                training=dict(data.get("training", {})),
                unknown_ids={
                    side: tuple(int(i) for i in ids)
                    for side, ids in data.get("read_as_unknown", {}).items()
                },
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            if isinstance(error, VocabularyError):
                raise
            raise VocabularyError(
                f"{origin}: not a valid vocabulary metadata file ({error!r})"
            ) from error


def _sentences(paths: Sequence[str | os.PathLike[str]]) -> Iterator[str]:
    from translator.io import iter_lines

    return itertools.chain.from_iterable(iter_lines(path) for path in paths)


def _vocab_listing(model_proto: bytes) -> bytes:
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=model_proto)
    lines = (
        f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n"
        for i in range(processor.get_piece_size())
    )
    return "".join(lines).encode("utf-8")


def build_vocabulary(
    source_files: Sequence[str | os.PathLike[str]],
    target_files: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    *,
    vocab_size: int,
    model_type: str = "unigram",
    joint: bool = True,
    character_coverage: float = DEFAULT_CHARACTER_COVERAGE,
    byte_fallback: bool = True,
    max_sentences: int = DEFAULT_MAX_SENTENCES,
    seed: int = DEFAULT_SEED,
    num_threads: int = DEFAULT_NUM_THREADS,
    user_symbols: Sequence[str] = (),
    overwrite: bool = False,
) -> VocabularyMetadata:
    """Trains SentencePiece model(s) and writes a vocabulary directory.

    Files are streamed (never loaded whole; see `train_sentencepiece` for the sampling
    of very large corpora). Joint: one model trained on all source then all target
    lines, `vocab_size` ids shared. Separate: one model per side, `vocab_size` ids each.

    Args:
        source_files: Source-language text files (plain or gzip), one sentence a line.
        target_files: Target-language text files.
        out_dir: Directory to write (created if needed).
        vocab_size: Ids per model, specials included.
        model_type: "unigram" or "bpe".
        joint: One shared model (True) or one per side (False).
        character_coverage: See `train_sentencepiece`.
        byte_fallback: See `train_sentencepiece`.
        max_sentences: See `train_sentencepiece` (per model).
        seed: See `train_sentencepiece`.
        num_threads: See `train_sentencepiece`.
        user_symbols: See `train_sentencepiece`: tags for corpora or target languages,
            one piece each; recorded as the vocabulary's tags.
        overwrite: Replace an existing vocabulary in `out_dir`.

    Returns:
        The metadata written to `out_dir/vocab.json`.

    Raises:
        VocabularyError: bad settings, an existing vocabulary without `overwrite`, or
            SentencePiece failing.
        CorpusError: an input file missing or not UTF-8 (naming file and line).
    """
    # Over 60 lines for its docstring: one line per setting.
    out = Path(out_dir)
    _check_inputs(out, source_files, target_files, overwrite)
    settings = dict(
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        max_sentences=max_sentences,
        seed=seed,
        num_threads=num_threads,
        user_symbols=tuple(user_symbols),
    )
    models = _train_models(source_files, target_files, joint, settings)
    _write_models(out, models)
    metadata = _metadata(models, source_files, target_files, settings)
    write_atomic(out / METADATA_FILE, metadata.to_json())
    return metadata


def _check_inputs(
    out: Path,
    source_files: Sequence[str | os.PathLike[str]],
    target_files: Sequence[str | os.PathLike[str]],
    overwrite: bool,
) -> None:
    """Checks, before any training, that `build_vocabulary` can write what it is asked.

    Args:
        out: The vocabulary directory to write.
        source_files: Source-language text files.
        target_files: Target-language text files.
        overwrite: Whether an existing vocabulary in `out` may be replaced.

    Raises:
        VocabularyError: an existing vocabulary without `overwrite`, or a side without
            files.
        CorpusError: an input file that does not exist.
    """
    if (out / METADATA_FILE).exists() and not overwrite:
        raise VocabularyError(
            f"{out} already holds a vocabulary ({METADATA_FILE}); "
            "pass overwrite=True (--overwrite) to replace it"
        )
    if not source_files or not target_files:
        raise VocabularyError("build_vocabulary needs at least one source and one target file")
    for path in [*source_files, *target_files]:
        if not Path(path).is_file():
            raise CorpusError(f"{path}: no such file")


def _train_models(
    source_files: Sequence[str | os.PathLike[str]],
    target_files: Sequence[str | os.PathLike[str]],
    joint: bool,
    settings: dict[str, Any],
) -> dict[str, bytes]:
    """Trains the joint model, or one model per side.

    Args:
        source_files: Source-language text files.
        target_files: Target-language text files.
        joint: One model on all source then all target lines, else one per side.
        settings: Keywords of `train_sentencepiece`.

    Returns:
        `{"spm": model}` if joint, else `{"source": model, "target": model}`: file stems
        and serialized models.
    """
    if joint:
        return {"spm": train_sentencepiece(_sentences([*source_files, *target_files]), **settings)}
    source = train_sentencepiece(_sentences(source_files), **settings)
    target = train_sentencepiece(_sentences(target_files), **settings)
    return {"source": source, "target": target}


def _write_models(out: Path, models: dict[str, bytes]) -> None:
    """Writes each model's `.model` and `.vocab` files, after removing `vocab.json`.

    The directory is incomplete until the metadata is written again (last).

    Args:
        out: The vocabulary directory (created if needed).
        models: File stem -> serialized model, as `_train_models` returns.
    """
    out.mkdir(parents=True, exist_ok=True)
    stale = out / METADATA_FILE
    stale.unlink(missing_ok=True)  # the directory is incomplete until metadata is rewritten
    for stem, proto in models.items():
        write_atomic(out / f"{stem}.model", proto)
        write_atomic(out / f"{stem}.vocab", _vocab_listing(proto))


def write_vocabulary(
    out: str | os.PathLike[str],
    models: dict[str, bytes],
    training: dict[str, Any],
    unknown_ids: dict[str, tuple[int, ...]] | None = None,
) -> VocabularyMetadata:
    """Writes a vocabulary directory of SentencePiece models made elsewhere (an import).

    Args:
        out: The directory to write.
        models: `{"spm": model}` (joint) or `{"source": ..., "target": ...}`, each with our
            special ids and the same size.
        training: What made them, for the record (`user_symbols`: the tags).
        unknown_ids: `VocabularyMetadata.unknown_ids`.

    Returns:
        The metadata written to `out/vocab.json`.
    """
    import sentencepiece as spm

    sizes = {
        spm.SentencePieceProcessor(model_proto=proto).get_piece_size() for proto in models.values()
    }
    if len(sizes) != 1:
        raise VocabularyError(f"the models of one vocabulary differ in size: {sorted(sizes)}")
    joint = "spm" in models
    source, target = ("spm", "spm") if joint else ("source", "target")
    metadata = VocabularyMetadata(
        model_type=_proto_model_type(models[source]),
        vocab_size=sizes.pop(),
        joint=joint,
        source_model=f"{source}.model",
        target_model=f"{target}.model",
        source_sha256=sha256_bytes(models[source]),
        target_sha256=sha256_bytes(models[target]),
        training={**training, "sentencepiece_version": spm.__version__},
        unknown_ids=dict(unknown_ids or {}),
    )
    _write_models(Path(out), models)
    write_atomic(Path(out) / METADATA_FILE, metadata.to_json())
    return metadata


def _proto_model_type(proto: bytes) -> str:
    from sentencepiece import sentencepiece_model_pb2

    parsed = sentencepiece_model_pb2.ModelProto()
    parsed.ParseFromString(proto)
    return {1: "unigram", 2: "bpe"}.get(parsed.trainer_spec.model_type, "other")


def _metadata(
    models: dict[str, bytes],
    source_files: Sequence[str | os.PathLike[str]],
    target_files: Sequence[str | os.PathLike[str]],
    settings: dict[str, Any],
) -> VocabularyMetadata:
    """The `vocab.json` record of the models `_train_models` returned.

    Args:
        models: File stem -> serialized model (`"spm"` when joint).
        source_files: Source-language text files (recorded).
        target_files: Target-language text files (recorded).
        settings: Keywords of `train_sentencepiece` (recorded).

    Returns:
        The metadata.
    """
    import sentencepiece as spm

    joint = "spm" in models
    source, target = ("spm", "spm") if joint else ("source", "target")
    return VocabularyMetadata(
        model_type=settings["model_type"],
        vocab_size=settings["vocab_size"],
        joint=joint,
        source_model=f"{source}.model",
        target_model=f"{target}.model",
        source_sha256=sha256_bytes(models[source]),
        target_sha256=sha256_bytes(models[target]),
        training={
            **settings,
            "normalization_rule_name": "identity",
            "remove_extra_whitespaces": True,
            "sentencepiece_version": spm.__version__,
            "source_files": [str(p) for p in source_files],
            "target_files": [str(p) for p in target_files],
        },
    )


@dataclasses.dataclass(frozen=True)
class VocabularyFiles:
    """A vocabulary directory's checked model files (`read_vocabulary_files`)."""

    # The contents of vocab.json.
    metadata: VocabularyMetadata
    # The serialized SentencePiece models; the same bytes when joint.
    source_proto: bytes
    target_proto: bytes


def read_vocabulary_files(directory: str | os.PathLike[str]) -> VocabularyFiles:
    """Reads a vocabulary directory's models and checks them, without TensorFlow.

    Each model file must match the sha256 in `vocab.json`, have the special ids PAD=0,
    UNK=1, BOS=2, EOS=3 and the size `vocab.json` says.

    Raises:
        VocabularyError: naming the missing, altered or invalid file.
    """
    import sentencepiece

    root = Path(directory)
    meta_path = root / METADATA_FILE
    if not meta_path.is_file():
        raise VocabularyError(
            f"{root} is not a vocabulary directory (no {METADATA_FILE}); build one with "
            "`translator build-vocab`"
        )
    metadata = VocabularyMetadata.from_json(meta_path.read_text("utf-8"), origin=str(meta_path))

    def read(name: str, sha256: str, role: str) -> bytes:
        path = root / name
        try:
            proto = path.read_bytes()
        except OSError as error:
            raise VocabularyError(
                f"{path}: cannot read the {role} model: {error.strerror}"
            ) from error
        if sha256_bytes(proto) != sha256:
            raise VocabularyError(
                f"{path}: sha256 {sha256_bytes(proto)} differs from {sha256} in {meta_path}; "
                "the model file was changed after the vocabulary was built"
            )
        try:
            processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
        except Exception as error:
            raise VocabularyError(f"{path}: not a SentencePiece model ({error})") from error
        special = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if special != SPECIAL_IDS:
            raise VocabularyError(
                f"{path}: special ids (pad, unk, bos, eos) are {special}, expected {SPECIAL_IDS}"
            )
        if processor.get_piece_size() != metadata.vocab_size:
            raise VocabularyError(
                f"{path}: {processor.get_piece_size()} ids, but {meta_path} says "
                f"{metadata.vocab_size}"
            )
        return proto

    source = read(
        metadata.source_model, metadata.source_sha256, "joint" if metadata.joint else "source"
    )
    target = source
    if not metadata.joint:
        target = read(metadata.target_model, metadata.target_sha256, "target")
    return VocabularyFiles(metadata, source, target)
