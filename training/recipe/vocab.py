"""Stage 2 of the recipe: the joint SentencePiece vocabulary, of the planned size.

The size is the planner's vocabulary rule of the corpus' characters, unless the user
gave one; a planned size the corpus cannot fill falls back to the most SentencePiece
supports. Fine-tuning keeps the model's own vocabulary: a copy of it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from training.finetune import find_init_model
from training.planning.rules import choose_vocab_size, vocab_size_reason
from training.recipe.corpus import RecipeCorpus
from training.recipe.settings import RecipePaths, RecipeSettings
from translator.errors import ConfigError
from translator.io import atomic_directory, count_characters
from translator.pipelines import VocabularyError, build_vocabulary


def build_vocab(paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus) -> None:
    """Stage 2: the joint SentencePiece vocabulary of the training data, of planned size."""
    print(f"[2/5] vocabulary -> {paths.vocabulary}", flush=True)
    if (paths.vocabulary / "vocab.json").is_file():
        print("  already built")
        return
    if settings.init_from is not None:
        copy_init_vocabulary(paths, settings.init_from)
        return
    size, why = settings.vocab_size, "--vocab-size"
    if size is None:
        characters = sum(count_characters(*files.files) for files in corpus.train)
        size = choose_vocab_size(characters)
        why = f"planned: {vocab_size_reason(characters)}"
    tags = corpus.tags
    print(f"  {size:,} pieces ({why})" + (f"; tags {', '.join(tags)}" if tags else ""), flush=True)
    sources = [files.source for files in corpus.train]
    targets = [files.target for files in corpus.train]

    def build(size: int) -> None:
        build_vocabulary(sources, targets, paths.vocabulary, vocab_size=size, user_symbols=tags)

    try:
        build(size)
    except VocabularyError as error:
        # A planned size the corpus cannot fill (few distinct words): SentencePiece says
        # the most it supports; a size the user asked for stays an error.
        if settings.vocab_size is not None or error.supported_size is None:
            raise
        size = error.supported_size
        print(f"  {size:,} pieces: all that the corpus supports", flush=True)
        build(size)


def copy_init_vocabulary(paths: RecipePaths, init_from: Path) -> None:
    """Fine-tuning keeps the model's vocabulary: a copy of it, not a new one.

    Raises:
        ConfigError: the model to fine-tune has no vocabulary beside it.
    """
    init = find_init_model(init_from)
    if init.vocabulary_dir is None:
        raise ConfigError(f"--init-from {init_from}: no vocab/ beside the model to fine-tune with")
    with atomic_directory(paths.vocabulary) as staging:
        shutil.copytree(init.vocabulary_dir, staging, dirs_exist_ok=True)
    print(f"  the vocabulary of {init_from} ({init.vocabulary_dir})", flush=True)
