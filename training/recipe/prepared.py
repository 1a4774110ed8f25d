"""The recipe's training corpus, prepared once where training reads it prepared (on JAX).

On JAX the recipe trains from a prepared corpus (`translator data prepare`): the text is
tokenized once, here, with its validation set (WORKDIR/prepared/valid, for the validation
loss), and training reads id arrays without TensorFlow. It is kept in WORKDIR/prepared and
reused by a rerun, which then needs no TensorFlow, while it matches the corpus, the
vocabulary and the length limits. TensorFlow's training reads the text through tf.data.
"""

from __future__ import annotations

from pathlib import Path

from training.recipe.corpus import RecipeCorpus
from training.recipe.settings import RecipePaths, RecipeSettings
from translator.errors import ConfigError
from translator.host_text import tensorflow_installed
from translator.io import count_characters
from translator.pipelines.config import PipelineConfig
from translator.pipelines.errors import CorpusError
from translator.pipelines.prepared import VALIDATION_DIR, PreparedCorpus
from translator.pipelines.vocabulary import Vocabulary, load_vocabulary


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
    pipeline = settings.config.config.data.pipeline
    if len(corpus.train) > 1:
        print("  training reads the text (tf.data): a mix of corpora is not prepared")
        return None
    if pipeline.samples_subwords:
        print("  training reads the text (tf.data): subword sampling segments it each epoch")
        return None
    (files,) = corpus.train
    vocabulary = load_vocabulary(paths.vocabulary)
    target = paths.workdir / "prepared"
    wanted = {
        "": (str(files.source), str(files.target), files.tag),
        VALIDATION_DIR: (str(corpus.valid[0]), str(corpus.valid[1]), corpus.valid_tag),
    }
    if all(_kept(target / part, vocabulary, pipeline, made) for part, made in wanted.items()):
        print(f"  prepared corpus: {target} (prepared before)", flush=True)
        return target
    if not tensorflow_installed():
        raise ConfigError(
            f"--workdir {paths.workdir}: the corpus is prepared once by tf.data, and "
            "TensorFlow is not installed here; run this recipe (with --plan, say) where it "
            "is, then carry the work directory here: training reads the prepared corpus"
        )
    from translator.pipelines.prepare import prepare_corpus  # (tf.data: TensorFlow)

    print(f"  preparing the corpus once -> {target}", flush=True)
    for part, (source, target_file, tag) in wanted.items():
        manifest = prepare_corpus(source, target_file, vocabulary, target / part, pipeline, tag=tag)
        print(f"  {part or 'train'}: {manifest.summary()}", flush=True)
    return target


def fixed_vocabulary() -> str | None:
    """Why the vocabulary cannot be built again here, or None where it can.

    Without TensorFlow (a JAX-only accelerator machine) the corpus prepared on the
    vocabulary cannot be prepared again on another: the vocabulary stays what it is.
    """
    if tensorflow_installed():
        return None
    return "the corpus is prepared on it, and TensorFlow, which prepares another, is not here"


def _kept(
    path: Path, vocabulary: Vocabulary, pipeline: PipelineConfig, made: tuple[str, str, str]
) -> bool:
    """Whether `path` holds a prepared corpus of these files, vocabulary and limits."""
    try:
        kept = PreparedCorpus(path)
        kept.check(
            vocabulary.source_sha256,
            vocabulary.target_sha256,
            pipeline.max_source_length,
            pipeline.max_target_length,
        )
    except (CorpusError, ConfigError):
        return False  # none yet, or of another corpus or vocabulary: prepared again
    manifest = kept.manifest
    source, target, tag = made
    if manifest.tag != tag:
        return False
    if (manifest.source_path, manifest.target_path) == (source, target):
        return True
    # A work directory copied elsewhere (to an accelerator machine): the same files if
    # they have the same names and characters.
    names = (Path(manifest.source_path).name, Path(manifest.target_path).name)
    return names == (Path(source).name, Path(target).name) and (
        count_characters(source, target) == manifest.characters
    )
