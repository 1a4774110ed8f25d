"""`Vocabulary`: a vocabulary directory's two sides, loaded once and checked.

Loading needs no TensorFlow: what training reads of a vocabulary (sizes, tags, hashes)
and the host's text path (`HostText`) come from the files and the `sentencepiece`
package. The in-graph tokenizers (`SentencePieceTokenizer`, tensorflow-text) that the
tf.data pipeline, `Translator`'s graph path and the SavedModel run are made the first
time they are asked for, so a JAX run on a machine without TensorFlow loads the same
`Vocabulary`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

from translator.constants import UNK_ID
from translator.pipelines.errors import VocabularyError
from translator.pipelines.vocab import VocabularyFiles, VocabularyMetadata, read_vocabulary_files

if TYPE_CHECKING:  # pragma: no cover
    from translator.alignment import PieceWords
    from translator.host_text import HostText
    from translator.pipelines.tokenizer import SentencePieceTokenizer


class Vocabulary:
    """Source and target sides of a vocabulary directory (`load_vocabulary`).

    Args:
        files: The directory's checked model files.
        directory: Where they were read from.
    """

    def __init__(self, files: VocabularyFiles, directory: Path):
        self.files = files
        # The contents of vocab.json.
        self.metadata: VocabularyMetadata = files.metadata
        # Where it was loaded from.
        self.directory = directory

    @functools.cached_property
    def source(self) -> SentencePieceTokenizer:
        """The in-graph tokenizer of source sentences (TensorFlow's)."""
        return self._tokenizer(self.files.source_proto, "joint" if self.joint else "source")

    @functools.cached_property
    def target(self) -> SentencePieceTokenizer:
        """The in-graph tokenizer of target sentences (`source` itself when joint)."""
        if self.joint:
            return self.source
        return self._tokenizer(self.files.target_proto, "target")

    def _tokenizer(self, proto: bytes, role: str) -> SentencePieceTokenizer:
        import tensorflow as tf

        from translator.pipelines.tokenizer import SentencePieceTokenizer

        unknown = self.metadata.unknown_ids.get("target" if role == "target" else "source", ())
        # Made eagerly even when first asked for inside a traced function (a tf.data map):
        # its model resource must outlive that graph.
        with tf.init_scope():
            return SentencePieceTokenizer(proto, name=f"{role}_tokenizer", unknown_ids=unknown)

    @functools.cached_property
    def host(self) -> HostText:
        """The text path on the host (`sentencepiece` and NumPy): no TensorFlow."""
        from translator.host_text import HostText

        return HostText(self.directory, files=self.files)

    @functools.cached_property
    def piece_words(self) -> tuple[PieceWords, PieceWords]:
        """How each side's pieces make words, for word alignments (`translator.alignment`)."""
        import sentencepiece

        from translator.alignment import PieceWords

        tags = [self.host.piece_to_id(tag) for tag in self.metadata.tags]
        source, target = (
            PieceWords.of_sentencepiece(sentencepiece.SentencePieceProcessor(model_proto=p), tags)
            for p in (self.files.source_proto, self.files.target_proto)
        )
        return source, target

    @property
    def joint(self) -> bool:
        """True when source and target share one model."""
        return self.metadata.joint

    @property
    def source_sha256(self) -> str:
        """Hex sha256 of the source model file (checked when loaded)."""
        return self.metadata.source_sha256

    @property
    def target_sha256(self) -> str:
        """Hex sha256 of the target model file (checked when loaded)."""
        return self.metadata.target_sha256

    @property
    def source_vocab_size(self) -> int:
        """Ids of the source model (for `TransformerConfig.source_vocab_size`)."""
        return self.metadata.vocab_size

    @property
    def target_vocab_size(self) -> int:
        """Ids of the target model (for `TransformerConfig.target_vocab_size`)."""
        return self.metadata.vocab_size

    def tag_id(self, tag: str) -> int:
        """The source id of a tag (`build-vocab --user-symbols`), one piece by construction.

        Raises:
            VocabularyError: the vocabulary does not keep `tag` as one piece.
        """
        token_id = self.host.piece_to_id(tag)
        if tag not in self.metadata.tags or token_id == UNK_ID:
            pieces = self.host.encode([tag])[0]
            raise VocabularyError(
                f"tag {tag!r}: the vocabulary {self.directory} splits it into {len(pieces)} "
                f"pieces (its tags: {', '.join(self.metadata.tags) or 'none'}); build it with "
                f"`translator build-vocab --user-symbols {tag}`"
            )
        return token_id


def load_vocabulary(directory: str | os.PathLike[str]) -> Vocabulary:
    """Loads a vocabulary directory written by `build_vocabulary`.

    Checks that each model file matches the sha256 in `vocab.json` and has the special
    ids PAD=0, UNK=1, BOS=2, EOS=3.

    Args:
        directory: The directory (`translator build-vocab --out`).

    Returns:
        A `Vocabulary`; when joint, `.source` and `.target` are the same tokenizer object.

    Raises:
        VocabularyError: naming the missing, altered or invalid file.
    """
    root = Path(directory)
    return Vocabulary(read_vocabulary_files(root), root)
