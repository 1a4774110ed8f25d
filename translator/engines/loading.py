"""Load a model for translation: one entry point for every engine.

`load_translator` picks the engine for what `--model` names, builds the `Translator` and
warms it up, so the first real batch is timed as decoding, not tracing.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

from translator.engines.base import CTRANSLATE2_REPLICAS, InferenceOptions, LoadedModel

if TYPE_CHECKING:  # pragma: no cover
    from translator.documents import SentenceSplitter
    from translator.inference import Translator
    from translator.search.config import SearchConfig


@dataclasses.dataclass(frozen=True)
class LoadedTranslator:
    """A loaded model and its warmed-up `Translator`."""

    # What was loaded: our model directory or a CTranslate2 export.
    loaded: LoadedModel
    translator: Translator
    # Reading the weights and building the engine.
    load_seconds: float
    # Building the search graph, on one dummy sentence (so rates measure decoding only).
    warmup_seconds: float
    # What the engine runs differently from the search asked for (one phrase each).
    notes: tuple[str, ...] = ()


def load_translator(
    model: str | Path, search: SearchConfig, options: InferenceOptions | None = None
) -> LoadedTranslator:
    """Loads `model`, builds its `Translator` with the `search` settings and warms it up.

    Args:
        model: A model or run directory, or a CTranslate2 export.
        search: The `SearchConfig`.
        options: Batching, engine and precision (default `InferenceOptions()`).

    Raises:
        ModelDirError, PipelineError: for a directory that cannot be loaded.
        ConfigError: for options the engine cannot run.
    """
    options = options or InferenceOptions()
    started = time.monotonic()
    if uses_ctranslate2(model, options.engine):
        loaded, translator, notes = _ctranslate2_translator(model, search, options)
    else:
        loaded, translator, notes = _tensorflow_translator(model, search, options)
    ready = time.monotonic()
    translator.translate(["warm up"])  # traces the search once; later batches reuse it
    return LoadedTranslator(
        loaded, translator, ready - started, time.monotonic() - ready, tuple(notes)
    )


def uses_ctranslate2(model: str | Path, engine: str) -> bool:
    """Whether `engine` (and, for "auto", what `model` is) picks CTranslate2."""
    from translator.engines.ctranslate2_files import is_ctranslate2_dir

    return engine == "ctranslate2" or (engine == "auto" and is_ctranslate2_dir(model))


def check_model(model: str | Path, engine: str) -> None:
    """Fails fast, before TensorFlow starts, on a model the engine cannot load."""
    from translator.artifacts import resolve_model_dir
    from translator.engines.ctranslate2_files import check_ctranslate2_dir

    if uses_ctranslate2(model, engine):
        check_ctranslate2_dir(model)
    else:
        resolve_model_dir(model)


def _tensorflow_translator(model, search, options):
    """Our model directory and a `Translator` over this Keras backend's search.

    From the search cache when there is one (TensorFlow's).
    """
    from translator.artifacts import load_model, read_model_dir
    from translator.search.compiled import compiled_search, saves_as_graph

    files = read_model_dir(model)

    def build():
        trained = load_model(files)  # (the directory is read once, above)
        inference_model = trained.model.for_inference(options.precision)
        return compiled_search(inference_model, search, options.xla)

    if not (options.cache_search and not options.xla and saves_as_graph()):
        return files, _translator(build(), files, options), []
    from translator.engines import search_cache  # (TensorFlow's graphs)

    entry = search_cache.entry_path(files, search, options.precision)
    decoder = search_cache.load_cached(entry, search, files.model_config, build)
    if decoder is None:
        decoder = build()
        search_cache.save_search(decoder, entry)
    return files, _translator(decoder, files, options), []


def _translator(decoder, files, options):
    """A `Translator` over our search, batched and split as `options` say."""
    from translator.constants import DEFAULT_PARALLEL_BATCHES
    from translator.inference import Translator

    return Translator(
        decoder,
        files.vocabulary,
        batch_tokens=options.batch_tokens,
        max_source_length=options.max_source_length,
        tag=options.tag,
        parallel_batches=options.parallel_batches or DEFAULT_PARALLEL_BATCHES,
        splitter=splitter(files.metadata, options),
    )


def splitter(metadata: dict, options: InferenceOptions) -> SentenceSplitter | None:
    """What splits lines into sentences for a model (None with `options.split` off).

    By the rules of `options.source_lang`, else of the source language the model's
    record states (`translator.artifacts.model_languages`).
    """
    from translator.artifacts import model_languages
    from translator.documents import SentenceSplitter

    if not options.split:
        return None
    return SentenceSplitter(options.source_lang or model_languages(metadata)[0])


def _ctranslate2_translator(model, search, options):
    """The loaded CTranslate2 export and a `Translator` searching with it."""
    from translator.engines.ctranslate2_runtime import (
        CTranslate2Decoder,
        load_ctranslate2,
        rule_changes,
    )
    from translator.errors import ConfigError
    from translator.inference import Translator

    if options.xla:
        raise ConfigError("--xla compiles our TensorFlow search; CTranslate2 has its own")
    if options.precision != "model":
        raise ConfigError(
            "--precision sets our TensorFlow search's; a CTranslate2 export has the weights "
            "it was written with (translator export --quantization)"
        )
    replicas = options.parallel_batches or CTRANSLATE2_REPLICAS
    loaded = load_ctranslate2(model, replicas=replicas)
    translator = Translator(
        CTranslate2Decoder(loaded, search),
        loaded.vocabulary,
        batch_tokens=options.batch_tokens,
        max_source_length=options.max_source_length,
        tag=options.tag,
        parallel_batches=replicas,
        splitter=splitter(loaded.metadata, options),
    )
    changes = rule_changes(search)
    notes = [f"ctranslate2 runs {' and '.join(changes)}"] if changes else []
    return loaded, translator, notes
