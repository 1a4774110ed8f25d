"""Marian's ids -> ours: SentencePiece models rewritten to our ids, and the row mapping.

Marian has `</s>` = 0 and `<unk>` = 1, no padding and no BOS, and ids from a `.yml`
vocabulary, often one shared by two SentencePiece models whose own ids differ. Every
model here has PAD 0, UNK 1, BOS 2, EOS 3 and SentencePiece's ids after (`constants`), and
an in-graph tokenizer that reads the ids off the SentencePiece model. So the import
rewrites each SentencePiece model to our ids rather than adding a mapping layer:

- One id space per Marian vocabulary: our four specials, then Marian's pieces in its
  order, then the pieces of the SentencePiece model(s) Marian's vocabulary lacks (Marian
  reads those as `<unk>`, so they get its `<unk>` row). With one shared vocabulary both
  sides have the same ids, and embeddings tie as Marian's do.
- Each side's model lists every piece of that space. Its own pieces keep their scores
  and types, so it splits text exactly as the original; the other side's pieces are
  UNUSED (never produced); target-language tokens (`>>fra<<`) are USER_DEFINED, one
  piece wherever they are typed.
- BOS, the decoder's first input, gets a zero row: Marian starts from a zero embedding.
- Ids Marian's output layer does not have (PAD, BOS, the pieces it lacks) get a logit
  bias of `MASKED_LOGIT`, so their probability is exactly 0 in float32 and scores equal
  a softmax over Marian's vocabulary.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from translator.constants import (
    BOS_ID,
    BOS_PIECE,
    EOS_ID,
    EOS_PIECE,
    PAD_ID,
    PAD_PIECE,
    UNK_ID,
    UNK_PIECE,
)
from translator.marian.files import LANGUAGE_TOKEN, MarianImportError

# The logit bias of ids Marian cannot produce: exp(-1000 + any real logit) is 0 in
# float32, while label smoothing over them stays finite when fine-tuning.
MASKED_LOGIT = -1000.0
# Marian's special pieces.
MARIAN_EOS, MARIAN_UNK = "</s>", "<unk>"
# Our special pieces by id, and the pieces a Marian vocabulary may spell them with
# (`<pad>` is the entry Hugging Face's conversion appends).
SPECIALS = {PAD_ID: PAD_PIECE, UNK_ID: UNK_PIECE, BOS_ID: BOS_PIECE, EOS_ID: EOS_PIECE}
_OURS_OF_MARIAN = {MARIAN_EOS: EOS_ID, MARIAN_UNK: UNK_ID, PAD_PIECE: PAD_ID, BOS_PIECE: BOS_ID}
# SentencePiece piece types (sentencepiece_model.proto).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


@dataclasses.dataclass(frozen=True)
class IdSpace:
    """Our ids for one Marian vocabulary."""

    # Our pieces by our id.
    pieces: tuple[str, ...]
    # Marian's id of each of our ids, or -1 for a zero row (PAD, BOS): int [ids].
    marian_rows: np.ndarray
    # Whether Marian's output layer can produce the id: bool [ids].
    producible: np.ndarray
    # Our ids of the SentencePiece pieces Marian's vocabulary lacks: tokenizing gives
    # them as UNK, as Marian reads them (`VocabularyMetadata.unknown_ids`).
    unknown_ids: tuple[int, ...]

    @property
    def missing(self) -> int:
        """How many SentencePiece pieces Marian's vocabulary lacks."""
        return len(self.unknown_ids)

    def embedding(self, table: np.ndarray) -> np.ndarray:
        """Marian's `[marian_ids, d]` table with our rows: `[ids, d]`, zeros for -1."""
        rows = np.where(self.marian_rows[:, None] >= 0, table[np.maximum(self.marian_rows, 0)], 0.0)
        return rows.astype(np.float32)

    def output_bias(self, bias: np.ndarray | None) -> np.ndarray:
        """Marian's output bias `[marian_ids]` (or none) on our ids, masked where unproducible."""
        ours = np.zeros(len(self.pieces), np.float32)
        if bias is not None:
            ours = bias.reshape(-1)[np.maximum(self.marian_rows, 0)].astype(np.float32)
        return np.where(self.producible, ours, np.float32(MASKED_LOGIT))


def _model_proto(data: bytes, name: str):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as error:  # protobuf's DecodeError
        raise MarianImportError(f"{name}: not a SentencePiece model ({error})") from None
    if not proto.pieces:
        raise MarianImportError(f"{name}: not a SentencePiece model (no pieces)")
    return proto


def id_space(vocabulary: list[str], models: list[tuple[bytes, str]], size: int = 0) -> IdSpace:
    """Our ids for a Marian vocabulary and the SentencePiece models that use it.

    Args:
        vocabulary: Marian's pieces by id.
        models: `(serialized model, name)` of each SentencePiece model using it.
        size: Pad the space to this many ids with unused pieces (two vocabularies of
            different sizes: our vocabulary directory has one size).

    Raises:
        MarianImportError: a vocabulary without `</s>` or `<unk>`.
    """
    for needed in (MARIAN_EOS, MARIAN_UNK):
        if needed not in vocabulary:
            raise MarianImportError(f"the Marian vocabulary has no {needed}")
    marian_id = {piece: index for index, piece in enumerate(vocabulary)}
    pieces = [SPECIALS[i] for i in range(len(SPECIALS))]
    rows = [-1, marian_id[MARIAN_UNK], -1, marian_id[MARIAN_EOS]]
    producible = [False, True, False, True]  # PAD and BOS (Hugging Face's <pad> too): never
    for piece in vocabulary:
        if piece not in _OURS_OF_MARIAN:
            pieces.append(piece)
            rows.append(marian_id[piece])
            producible.append(True)
    seen, unknown = set(pieces), []
    for data, name in models:
        for piece in _model_proto(data, name).pieces:
            if piece.type in (NORMAL, USER_DEFINED, BYTE) and piece.piece not in seen:
                seen.add(piece.piece)
                unknown.append(len(pieces))
                pieces.append(piece.piece)
                rows.append(marian_id[MARIAN_UNK])
                producible.append(False)
    while len(pieces) < size:
        pieces.append(f"<unused{len(pieces)}>")
        rows.append(-1)
        producible.append(False)
    return IdSpace(tuple(pieces), np.array(rows), np.array(producible), tuple(unknown))


def rewrite_sentencepiece(data: bytes, name: str, space: IdSpace) -> bytes:
    """The SentencePiece model with `space`'s ids and our special ids, splitting as before.

    Raises:
        MarianImportError: not a SentencePiece model.
    """
    from sentencepiece import sentencepiece_model_pb2

    proto = _model_proto(data, name)
    own = {p.piece: p for p in proto.pieces if p.type not in (UNKNOWN, CONTROL)}
    rewritten = sentencepiece_model_pb2.ModelProto()
    rewritten.CopyFrom(proto)
    del rewritten.pieces[:]
    specials = {UNK_ID: UNKNOWN}
    for index, piece in enumerate(space.pieces):
        entry = rewritten.pieces.add()
        entry.piece = piece
        if index in SPECIALS:
            entry.type, entry.score = specials.get(index, CONTROL), 0.0
        elif piece in own:
            entry.type, entry.score = own[piece].type, own[piece].score
        else:
            entry.type = USER_DEFINED if LANGUAGE_TOKEN.match(piece) else UNUSED
            entry.score = 0.0
    spec = rewritten.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
    spec.pad_piece, spec.unk_piece = PAD_PIECE, UNK_PIECE
    spec.bos_piece, spec.eos_piece = BOS_PIECE, EOS_PIECE
    spec.vocab_size = len(space.pieces)
    return rewritten.SerializeToString()


def check_same_split(original: bytes, rewritten: bytes, name: str, lines: list[str]) -> None:
    """Raises unless the rewritten model splits `lines` into the original's pieces."""
    import sentencepiece as spm

    before = spm.SentencePieceProcessor(model_proto=original)
    after = spm.SentencePieceProcessor(model_proto=rewritten)
    for line in lines:
        if before.encode(line, out_type=str) != after.encode(line, out_type=str):
            raise MarianImportError(
                f"{name}: the model rewritten to our ids splits {line!r} differently "
                "(a bug: please report it)"
            )
