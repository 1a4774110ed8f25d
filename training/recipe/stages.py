r"""`translator recipe`: the whole job, one command, for any parallel corpus.

    translator recipe --workdir runs/multi30k --minutes 60            # Multi30k EN->DE
    translator recipe --workdir runs/fr-en --minutes 30 \
        --train corpus.fr.gz corpus.en.gz --test news.fr news.en
    translator recipe --workdir runs/fr-en-bt --minutes 30 \
        --train corpus.fr corpus.en --weight 2 --train synthetic.fr synthetic.en --tag "<bt>"

gets the corpus (Multi30k from `--mirror` / `$TRANSLATOR_DATA_MIRROR` when no files are
given; else the user's corpora, mixed by `--weight` and tagged by `--tag`, with a
seeded slice of the first held out for validation when no `--valid` is given), builds a
joint SentencePiece vocabulary of the planned size (keeping the tags one piece each: the
corpus' size, then the budget's, built again smaller where the budget buys few epochs), plans
and trains within the time budget (`training.planning.rules`: the corpus' size and this machine's
measured speed decide the model, batch, dropout, learning rate...), translates every
test set with beam search and scores it with sacreBLEU into a report, and exports a
SavedModel for serving; then prints where each result is. Each stage is skipped when its
result is already there, and an interrupted training resumes.
"""

from __future__ import annotations

import dataclasses

import keras

from training.planning.rules import Plan, Shape
from training.recipe.corpus import RecipeCorpus, prepare_data
from training.recipe.prepared import fixed_vocabulary, prepared_corpus
from training.recipe.pretrained import with_imported_init
from training.recipe.reports import RecipeSummary, evaluate_sets, summarize
from training.recipe.run_config import run_request
from training.recipe.settings import EXPORT_VERSION, RecipePaths, RecipeSettings, start_stage
from training.recipe.vocab import build_vocab, size_by_budget
from training.record import summary_line
from training.run import preview_plan, train
from translator.artifacts import MODEL_FILE, RUN_MODEL_DIR
from translator.host_text import tensorflow_installed
from translator.search.config import SearchConfig


def run_recipe(paths: RecipePaths, settings: RecipeSettings) -> RecipeSummary:
    """Every stage in order, each skipped when its result is already there.

    Raises:
        PipelineError, ConfigError, TrainingError: from the stage that failed.
    """
    corpus = prepare_data(paths, settings)
    settings = with_imported_init(paths, settings)
    build_vocab(paths, settings, corpus)
    size_vocabulary(paths, settings, corpus)
    train_model(paths, settings, corpus)
    evaluate_sets(paths, settings, corpus)
    export_model(paths, settings, corpus)
    return summarize(paths, corpus)


def plan_recipe(paths: RecipePaths, settings: RecipeSettings) -> Plan:
    """Stages 1 and 2, then the plan the training stage would train (`--plan`)."""
    corpus = prepare_data(paths, settings)
    settings = with_imported_init(paths, settings)
    build_vocab(paths, settings, corpus)
    size_vocabulary(paths, settings, corpus, preview=True)
    prepared = prepared_corpus(paths, settings, corpus, keras.backend.backend())
    config, request = run_request(paths, settings, corpus, prepared)
    return preview_plan(config, request, paths.run)


def size_vocabulary(
    paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus, preview: bool = False
) -> None:
    """Stage 2, continued: the budget weighs the vocabulary (`vocab.size_by_budget`)."""

    def plan_on() -> Plan:
        prepared = prepared_corpus(paths, settings, corpus, keras.backend.backend())
        config, request = run_request(paths, settings, corpus, prepared)
        return preview_plan(config, dataclasses.replace(request, vocabulary=None), paths.run)

    size_by_budget(paths, settings, corpus, plan_on, fixed_vocabulary(), preview)


def train_model(
    paths: RecipePaths,
    settings: RecipeSettings,
    corpus: RecipeCorpus,
    shape: tuple[Shape, str] | None = None,
    deadline: float | None = None,
) -> None:
    """Stage 3: planned training within the time budget (resumed if interrupted).

    `shape`: a shape chosen before planning, and why (a distillation's student).
    `deadline`: a `time.monotonic()` value training ends by, whatever is left of
    `settings.minutes` (a distillation's, whose minutes are the whole job's).
    """
    start_stage(settings, "training", f"training ({settings.minutes:.4g} minutes) -> {paths.run}")
    if (paths.run / RUN_MODEL_DIR / MODEL_FILE).is_file():
        print(f"  already trained: {paths.run / 'model'}")
        return
    prepared = prepared_corpus(paths, settings, corpus, keras.backend.backend())
    config, request = run_request(paths, settings, corpus, prepared)
    if shape is not None:
        request = dataclasses.replace(request, shape=shape)
    result = train(config, paths.run, planning=request, deadline=deadline)
    print(f"  {summary_line(result)}", flush=True)


def export_model(paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus) -> None:
    """Stage 5: the SavedModel (tokenizer, beam search, detokenizer inside).

    Its untagged signatures tag as validation did (the run's main direction); the tagged
    ones, written when there are tags, take any of them per sentence.
    """
    version = paths.export_version
    start_stage(settings, "export", f"SavedModel -> {version}")
    if (version / "saved_model.pb").is_file():
        print("  already exported")
        return
    if not tensorflow_installed():
        print(
            "  skipped: a SavedModel is written by TensorFlow, which is not installed here; "
            f"export where it is: translator export --model {paths.run} --out "
            f"{paths.export} --beam-size {settings.beam_size} (or rerun this recipe there)",
            flush=True,
        )
        return
    from translator.export import ExportConfig
    from translator.export import export_model as export_saved_model

    search = SearchConfig(beam_size=settings.beam_size, n_best=settings.beam_size)
    config = ExportConfig(search=search, tag=corpus.valid_tag)
    path = export_saved_model(paths.run, paths.export, config, version=EXPORT_VERSION)
    print(f"  exported {path}", flush=True)
