"""The recipe's training corpus, prepared once where training reads it prepared (on JAX).

On JAX the recipe trains from a prepared corpus (`translator data prepare`): the text is
tokenized once, here, and training reads id arrays without TensorFlow. It is kept in
WORKDIR/prepared and reused by a rerun while it matches the corpus, the vocabulary and
the length limits. TensorFlow's training reads the text through tf.data, as before.
"""

from __future__ import annotations

from pathlib import Path

from training.config import DEFAULT_CONFIG, load_config
from training.corpus_prep import RecipeCorpus
from training.recipe_settings import RecipePaths, RecipeSettings
from translator.errors import ConfigError
from translator.pipelines.errors import CorpusError
from translator.pipelines.prepared import PreparedCorpus


def prepared_corpus(
    paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus, backend: str
) -> Path | None:
    """WORKDIR/prepared, made once, when the recipe trains on JAX; else None (text).

    A mix of several corpora, and subword sampling (a segmentation drawn each epoch),
    read the text through tf.data, and the log says so.

    Args:
        paths: The recipe's directories.
        settings: The user's settings (their `--set` may change the length limits).
        corpus: The training files, after stage 1.
        backend: The Keras backend that trains (`keras.backend.backend()`).
    """
    if backend != "jax":
        return None
    pipeline = load_config(DEFAULT_CONFIG, settings.overrides).data.pipeline
    if len(corpus.train) > 1:
        print("  training reads the text (tf.data): a mix of corpora is not prepared")
        return None
    if pipeline.samples_subwords:
        print("  training reads the text (tf.data): subword sampling segments it each epoch")
        return None
    from translator.pipelines.prepare import prepare_corpus
    from translator.pipelines.tokenizer import load_vocabulary

    (files,) = corpus.train
    vocabulary = load_vocabulary(paths.vocabulary)
    target = paths.workdir / "prepared"
    try:
        kept = PreparedCorpus(target)
        kept.check(
            vocabulary.source.sha256,
            vocabulary.target.sha256,
            pipeline.max_source_length,
            pipeline.max_target_length,
        )
        manifest = kept.manifest
        if (manifest.source_path, manifest.target_path, manifest.tag) == (
            str(files.source),
            str(files.target),
            files.tag,
        ):
            print(f"  prepared corpus: {target} (prepared before)", flush=True)
            return target
    except (CorpusError, ConfigError):
        pass  # none yet, or of another corpus or vocabulary: prepared again
    print(f"  preparing the corpus once -> {target}", flush=True)
    manifest = prepare_corpus(
        files.source, files.target, vocabulary, target, pipeline, tag=files.tag
    )
    print(f"  {manifest.summary()}", flush=True)
    return target
