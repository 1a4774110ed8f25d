"""The text pipeline: datasets, vocabularies, and the tf.data input pipeline.

    from translator.pipelines import PipelineConfig, load_vocabulary, make_dataset

    vocabulary = load_vocabulary("data/vocab")        # from `translator build-vocab`
    train = make_dataset("train.en.gz", "train.de.gz", vocabulary,
                         PipelineConfig(batch_tokens=4096), training=True)
    for features, labels in train:                    # one epoch
        features["source_ids"], features["decoder_input_ids"], labels  # int32 [b, len]

Names are imported lazily, so `import translator.pipelines` does not start TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from translator.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID

if TYPE_CHECKING:  # pragma: no cover
    from translator.pipelines.config import Bucket, PipelineConfig
    from translator.pipelines.corpus import ParallelCorpus
    from translator.pipelines.dataset import CorpusStats, make_dataset, scan_corpus
    from translator.pipelines.download import DATASETS, MULTI30K, DatasetSpec, fetch_dataset
    from translator.pipelines.errors import (
        CorpusError,
        DownloadError,
        PipelineError,
        VocabularyError,
    )
    from translator.pipelines.tokenizer import SentencePieceTokenizer
    from translator.pipelines.vocab import VocabularyMetadata, build_vocabulary, train_sentencepiece
    from translator.pipelines.vocabulary import Vocabulary, load_vocabulary

_LAZY = {
    "Bucket": "config",
    "PipelineConfig": "config",
    "ParallelCorpus": "corpus",
    "CorpusStats": "dataset",
    "make_dataset": "dataset",
    "scan_corpus": "dataset",
    "DATASETS": "download",
    "MULTI30K": "download",
    "DatasetSpec": "download",
    "fetch_dataset": "download",
    "CorpusError": "errors",
    "DownloadError": "errors",
    "PipelineError": "errors",
    "VocabularyError": "errors",
    "SentencePieceTokenizer": "tokenizer",
    "Vocabulary": "vocabulary",
    "VocabularyMetadata": "vocab",
    "build_vocabulary": "vocab",
    "load_vocabulary": "vocabulary",
    "train_sentencepiece": "vocab",
}

__all__ = [
    "BOS_ID",
    "DATASETS",
    "EOS_ID",
    "MULTI30K",
    "PAD_ID",
    "UNK_ID",
    "Bucket",
    "CorpusError",
    "CorpusStats",
    "DatasetSpec",
    "DownloadError",
    "ParallelCorpus",
    "PipelineConfig",
    "PipelineError",
    "SentencePieceTokenizer",
    "Vocabulary",
    "VocabularyError",
    "VocabularyMetadata",
    "build_vocabulary",
    "fetch_dataset",
    "load_vocabulary",
    "make_dataset",
    "scan_corpus",
    "train_sentencepiece",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"translator.pipelines.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'translator.pipelines' has no attribute {name!r}")
