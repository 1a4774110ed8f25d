"""`SentencePieceTokenizer`: one SentencePiece model, in the graph (`load_vocabulary`: a pair).

In-graph (`tokenize`) it runs `tensorflow_text`; from Python (`encode`) the `sentencepiece`
package, with the same ids. Neither adds BOS or EOS.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops import sentencepiece_tokenizer as sentencepiece_ops

from translator.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from translator.io import sha256_bytes


class _SharedModelResource(sentencepiece_ops._SentencepieceModelResource):
    """tensorflow_text's SentencePiece model resource, under a process-wide shared name.

    A private one dies with `tf.random.set_seed`, failing functions that captured it;
    a shared name (with the model's sha256) keeps one for the process.
    """

    def __init__(self, model: bytes, shared_name: str) -> None:
        self._shared_name = shared_name
        super().__init__(model, None)

    def _create_resource(self) -> tf.Tensor:
        with tf.name_scope("SentencepieceModel"):
            return sentencepiece_ops.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=self._shared_name
            )


class SentencePieceTokenizer(tf.Module):
    """Tokenizes text to int32 ids and back with one SentencePiece model.

    Args:
        model_proto: The serialized SentencePiece model (the bytes of a `.model` file).
        name: Name of the `tf.Module`.
        unknown_ids: Ids that tokenizing gives as UNK_ID: pieces the model splits text
            into but the network has no row for (an imported Marian model's vocabulary
            lacks some; Marian reads them as `<unk>`). Empty for models trained here.
    """

    def __init__(
        self, model_proto: bytes, name: str | None = None, unknown_ids: Sequence[int] = ()
    ) -> None:
        super().__init__(name=name)
        self._model_proto = bytes(model_proto)
        self._processor = spm.SentencePieceProcessor(model_proto=self._model_proto)
        self.unknown_ids = tuple(sorted({int(i) for i in unknown_ids}))
        remap = np.arange(self._processor.get_piece_size(), dtype=np.int32)
        remap[list(self.unknown_ids)] = UNK_ID
        # id -> id, UNK_ID for `unknown_ids`; None when there are none (no extra op).
        self._remap = remap if self.unknown_ids else None
        # No BOS/EOS here: tokenize() returns the pieces only; the dataset adds specials.
        self._tokenizer = tf_text.SentencepieceTokenizer(
            model=self._model_proto, out_type=tf.int32, add_bos=False, add_eos=False
        )
        shared_name = f"translator_sentencepiece_{self.sha256}"
        self._tokenizer._model_resource = _SharedModelResource(self._model_proto, shared_name)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], name: str | None = None
    ) -> SentencePieceTokenizer:
        """Loads a `.model` file."""
        with open(path, "rb") as file:
            return cls(file.read(), name=name)

    @property
    def model_proto(self) -> bytes:
        """The serialized model: write it as a SavedModel asset to rebuild the tokenizer."""
        return self._model_proto

    @property
    def sha256(self) -> str:
        """Hex sha256 of `model_proto`: identifies the vocabulary."""
        return sha256_bytes(self._model_proto)

    @property
    def special_ids(self) -> tuple[int, int, int, int]:
        """The model's (pad, unk, bos, eos) ids; `translator.constants.SPECIAL_IDS` here."""
        processor = self._processor
        return (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included (ids are 0 .. vocab_size - 1)."""
        return self._processor.get_piece_size()

    def id_to_piece(self, token_id: int) -> str:
        """The piece string of one id (e.g. `"▁Haus"`, `"<0xC3>"`, `"</s>"`)."""
        return self._processor.id_to_piece(token_id)

    def piece_to_id(self, piece: str) -> int:
        """The id of a piece string (UNK_ID for an unknown piece)."""
        return self._processor.piece_to_id(piece)

    def tokenize(self, texts: tf.Tensor | str | list[str]) -> tf.RaggedTensor:
        """Tokenizes in-graph.

        Args:
            texts: tf.string `[batch]` (or anything convertible): UTF-8 sentences.

        Returns:
            int32 RaggedTensor `[batch, (pieces)]`, without BOS or EOS.
        """
        texts = tf.convert_to_tensor(texts, dtype=tf.string)  # [batch]
        ids = self._tokenizer.tokenize(texts)  # [batch, (pieces)] int32
        if self._remap is None:
            return ids
        return tf.ragged.map_flat_values(lambda flat: tf.gather(self._remap, flat), ids)

    @property
    def samples(self) -> bool:
        """Whether `sample` can draw segmentations: a unigram model (BPE has no n-best)."""
        from sentencepiece import sentencepiece_model_pb2

        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(self._model_proto)
        return proto.trainer_spec.model_type == sentencepiece_model_pb2.TrainerSpec.UNIGRAM

    def sample(
        self, texts: tf.Tensor, seed: tf.Tensor, nbest: int, alpha: float
    ) -> tf.RaggedTensor:
        """Tokenizes in-graph, each sentence segmented by a seeded draw (subword sampling).

        Kudo (2018)'s l-best sampling: a sentence's `nbest` most probable segmentations
        under the unigram model, one drawn with probability proportional to P(x) ** alpha
        (alpha 0: uniformly; larger: closer to the best one). The draws are a function
        of `seed` and the sentences only, so the same seed gives the same segmentations.
        (tensorflow_text's own sampling takes no seed; `sentencepiece` runs here.)

        Args:
            texts: tf.string `[batch]`: UTF-8 sentences.
            seed: int64 scalar.
            nbest: Segmentations drawn from per sentence (> 1).
            alpha: The smoothing exponent (>= 0).

        Returns:
            int32 RaggedTensor `[batch, (pieces)]`, without BOS or EOS; each row decodes
            to what `tokenize`'s row decodes to.
        """

        def draw(lines: tf.Tensor, seed: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
            rows = self.sample_ids(
                [line.decode("utf-8") for line in lines.numpy()], int(seed), nbest, alpha
            )
            lengths = np.array([len(row) for row in rows], np.int64)
            values = np.array([i for row in rows for i in row], np.int32)
            return values, lengths

        values, lengths = tf.py_function(draw, [texts, seed], [tf.int32, tf.int64])
        values.set_shape([None])
        lengths.set_shape([None])
        return tf.RaggedTensor.from_row_lengths(values, lengths, validate=False)

    def sample_ids(
        self, texts: Sequence[str], seed: int, nbest: int, alpha: float
    ) -> list[list[int]]:
        """`sample` from Python: each text's drawn segmentation, as ids."""
        scores = self._piece_scores()
        rng = np.random.default_rng(seed & 0xFFFFFFFFFFFFFFFF)
        rows = []
        for candidates in self._processor.nbest_encode(list(texts), nbest_size=nbest, out_type=int):
            if len(candidates) <= 1:
                rows.append(candidates[0] if candidates else [])
                continue
            log_p = np.array([scores[row].sum() for row in candidates]) * alpha
            weights = np.exp(log_p - log_p.max())
            rows.append(candidates[rng.choice(len(candidates), p=weights / weights.sum())])
        if self._remap is None:
            return rows
        return [[int(self._remap[i]) for i in row] for row in rows]

    def _piece_scores(self) -> np.ndarray:
        """Each id's unigram log probability, float64 `[vocab_size]`."""
        if not hasattr(self, "_scores"):
            processor = self._processor
            self._scores = np.array([processor.get_score(i) for i in range(self.vocab_size)])
        return self._scores

    def detokenize(self, ids: tf.Tensor | tf.RaggedTensor) -> tf.Tensor:
        """Turns ids back into text in-graph, stopping at the first EOS.

        PAD and BOS are removed wherever they are.

        Args:
            ids: Integer ids `[batch, length]`, dense (padded with PAD) or ragged.

        Returns:
            tf.string `[batch]`.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=PAD_ID)  # [batch, length]
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)  # [batch, length]
        # True at and after the first EOS of each row.
        after_eos = tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=-1) > 0  # [b, l]
        keep = ~after_eos & tf.not_equal(ids, PAD_ID) & tf.not_equal(ids, BOS_ID)  # [b, l]
        pieces = tf.ragged.boolean_mask(ids, keep)  # [batch, (kept)]
        return self._tokenizer.detokenize(pieces)  # [batch]

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Tokenizes from Python with the `sentencepiece` package (same ids as `tokenize`)."""
        rows = self._processor.encode(list(texts), out_type=int)
        if self._remap is None:
            return rows
        return [[int(self._remap[i]) for i in row] for row in rows]

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Python counterpart of `detokenize`: stops at EOS, drops PAD and BOS."""
        rows = []
        for row in ids:
            row = [int(i) for i in row]
            if EOS_ID in row:
                row = row[: row.index(EOS_ID)]
            rows.append([i for i in row if i not in (PAD_ID, BOS_ID)])
        return [self._processor.decode(row) for row in rows]

    def normalize(self, text: str) -> str:
        """The text as the model sees it after normalization, in plain spaces.

        With byte fallback, `decode(encode(text)) == normalize(text)`; under the identity
        rule used here only leading, trailing and repeated spaces are removed.
        """
        return self._processor.normalize(text).replace("\u2581", " ").lstrip(" ")
