"""Exporting a trained model as a text-in, text-out SavedModel that TF Serving can serve.

    from translator.export import ExportConfig, export_model
    path = export_model("runs/m30k", "exports/m30k", ExportConfig())   # exports/m30k/1

In-graph tokenization, search and detokenization (signatures: `translator.signatures`),
prepared exactly as `Translator` prepares a batch. Loading needs TensorFlow and
`tensorflow_text`, no `translator` code; plain TF ops, so stock TF Serving serves it.
`EXPORT_BASE/<version>/` also holds `assets/` (the SentencePiece models) and
`assets.extra/` (`translator.json` and the warm-up requests).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from translator.alignment import forced_attention, word_links
from translator.backends import BACKEND
from translator.engines.base import check_max_source_length
from translator.errors import TranslatorError
from translator.io import atomic_directory
from translator.layers.layer_norm import portable_layer_norms
from translator.search import SearchConfig, search
from translator.signatures import (
    ALIGNED_SIGNATURE,
    INPUTS_KEY,
    METADATA_FILE,
    N_BEST_SIGNATURE,
    PREFIXED_SIGNATURE,
    PREFIXES_KEY,
    SAMPLE_SIGNATURE,
    SERVING_SIGNATURE,
    TAGGED_N_BEST_SIGNATURE,
    TAGGED_SIGNATURE,
    TAGS_KEY,
    describe_signatures,
)
from translator.warmup import export_requests, warmup_path, write_warmup_requests

if TYPE_CHECKING:  # pragma: no cover
    from translator.artifacts import TrainedModel
    from translator.model import Transformer
    from translator.pipelines.vocabulary import Vocabulary

# The padding rule of `Translator`: sharing it makes the exported batches identical.
from translator.text import default_max_source_length, finish, prepare, target_prefixes

OUTPUT_TRANSLATIONS = "translations"
OUTPUT_SCORES = "scores"
OUTPUT_ALIGNMENTS = "alignments"
EXPORT_FORMAT = 1


class ExportError(TranslatorError, ValueError):
    """The export cannot be written; the message says why."""


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """How the exported model translates (fixed in the graph)."""

    # The search of the signatures; `n_best` sizes the `n_best` signature's lists.
    search: SearchConfig = dataclasses.field(default_factory=SearchConfig)
    # Longer sources are cut to this many tokens, EOS included; None: as `Translator`.
    max_source_length: int | None = None
    # Prepended to every source as one id (e.g. <2de>): fixed for the untagged signatures,
    # and what a tagged signature's "" tag means. "": none.
    tag: str = ""
    # The `sample` signature's draws; None: no sample signature.
    sampling: SearchConfig | None = None

    def __post_init__(self) -> None:
        check_max_source_length(self.max_source_length)
        if self.sampling is not None and not self.sampling.sampled:
            raise ExportError("ExportConfig.sampling must set `sampling` (e.g. topk:10)")


class TranslationModule(tf.Module):
    """Tokenizer, search and detokenizer in one saveable module.

    Args:
        model: A built `translator.model.Transformer`.
        vocabulary: Its `translator.pipelines.Vocabulary` (a directory on disk).
        config: The `ExportConfig`.
    """

    def __init__(
        self, model: Transformer, vocabulary: Vocabulary, config: ExportConfig | None = None
    ):
        super().__init__(name="translator")
        config = config or ExportConfig()
        if not model.built:
            model.build()  # weights must exist before tracing
        self.model = model
        self.source_tokenizer = vocabulary.source
        self.target_tokenizer = vocabulary.target
        self.max_source_length = (
            default_max_source_length(model.config)
            if config.max_source_length is None
            else config.max_source_length
        )
        if self.max_source_length < 2:
            raise ExportError(f"max_source_length must be >= 2, got {self.max_source_length}")
        self.tag = config.tag
        self.tag_id = vocabulary.tag_id(config.tag) if config.tag else None
        # The vocabulary's tags and their ids, for the tagged signatures.
        self.tags = vocabulary.metadata.tags
        self.tag_ids = tuple(vocabulary.tag_id(tag) for tag in self.tags)
        self.best_config = dataclasses.replace(config.search, n_best=1)
        # How the pieces of each side make words (the alignments' words).
        self.piece_words = vocabulary.piece_words
        self.n_best_config = config.search
        self.sample_config = config.sampling
        directory = Path(vocabulary.directory)
        self.source_vocabulary = tf.saved_model.Asset(
            str(directory / vocabulary.metadata.source_model)
        )
        self.target_vocabulary = tf.saved_model.Asset(
            str(directory / vocabulary.metadata.target_model)
        )
        spec = tf.TensorSpec([None], tf.string, name=INPUTS_KEY)
        # No Python control flow depends on tensors here: AutoGraph would only slow tracing.
        self.translate = tf.function(self._translate_best, input_signature=[spec], autograph=False)
        self.translate_n_best = tf.function(
            self._translate_n_best, input_signature=[spec], autograph=False
        )
        self.translate_aligned = tf.function(
            self._translate_aligned, input_signature=[spec], autograph=False
        )
        prefixes = tf.TensorSpec([None], tf.string, name=PREFIXES_KEY)
        self.translate_prefixed = tf.function(
            self._translate_prefixed, input_signature=[spec, prefixes], autograph=False
        )
        # Saving traces every tf.function of the module: only those that apply exist.
        if self.sample_config is not None:
            self.sample = tf.function(self._sample, input_signature=[spec], autograph=False)
        if self.tags:
            tags = tf.TensorSpec([None], tf.string, name=TAGS_KEY)
            self.translate_tagged = tf.function(
                self._translate_tagged, input_signature=[spec, tags], autograph=False
            )
            self.translate_tagged_n_best = tf.function(
                self._translate_tagged_n_best, input_signature=[spec, tags], autograph=False
            )

    def signatures(self) -> dict[str, tf.types.experimental.PolymorphicFunction]:
        """The functions to save as signatures, by signature name.

        The functions, not their concrete functions: `tf.saved_model.save` traces them
        inside its save context, whose tracing key differs from outside it, so a concrete
        function taken here would be traced a second time there.
        """
        signatures = {
            SERVING_SIGNATURE: self.translate,
            N_BEST_SIGNATURE: self.translate_n_best,
        }
        if self.tags:
            signatures[TAGGED_SIGNATURE] = self.translate_tagged
            signatures[TAGGED_N_BEST_SIGNATURE] = self.translate_tagged_n_best
        signatures[PREFIXED_SIGNATURE] = self.translate_prefixed
        signatures[ALIGNED_SIGNATURE] = self.translate_aligned
        if self.sample_config is not None:
            signatures[SAMPLE_SIGNATURE] = self.sample
        return signatures

    def _translate_best(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._best(*self._translate(inputs, self.tag_id, self.best_config))

    def _translate_n_best(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._lists(*self._translate(inputs, self.tag_id, self.n_best_config))

    def _translate_tagged(self, inputs: tf.Tensor, tags: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._best(*self._translate(inputs, self._tag_ids(inputs, tags), self.best_config))

    def _translate_tagged_n_best(self, inputs: tf.Tensor, tags: tf.Tensor) -> dict[str, tf.Tensor]:
        tag_ids = self._tag_ids(inputs, tags)
        return self._lists(*self._translate(inputs, tag_ids, self.n_best_config))

    def _translate_prefixed(self, inputs: tf.Tensor, prefixes: tf.Tensor) -> dict[str, tf.Tensor]:
        check = tf.debugging.assert_equal(
            tf.shape(prefixes),
            tf.shape(inputs),
            message=f"'{PREFIXES_KEY}' must have one prefix per sentence of '{INPUTS_KEY}'",
        )
        with tf.control_dependencies([check]):
            return self._best(*self._translate(inputs, self.tag_id, self.best_config, prefixes))

    def _translate_aligned(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        """The best translation of each sentence and its word alignment (Pharaoh pairs).

        As `Translator.search(..., alignments=True)` with no splitter: the same attention
        (`translator.alignment.forced_attention`) and words (`word_links`).
        """
        prepared = prepare(inputs, self.source_tokenizer, self.max_source_length, self.tag_id)
        source_table, target_table = self.piece_words

        def decode() -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            result = search(self.model, prepared.source_ids, self.best_config)
            targets = result.ids[:, 0, :]  # [searched, length]
            weights = forced_attention(self.model, prepared.source_ids, targets)
            links = word_links(
                weights, prepared.source_ids, targets, source_table, target_table
            )  # [searched, source words, target words]
            return result.ids, result.scores, _pharaoh_rows(links)

        def nothing() -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            return tf.zeros([0, 1, 1], tf.int32), tf.zeros([0, 1]), tf.zeros([0], tf.string)

        ids, scores, pairs = tf.cond(tf.size(prepared.rows) > 0, decode, nothing)
        batch = tf.shape(inputs)[0]
        translations, scores = finish(ids, scores, prepared.rows, batch, self.target_tokenizer)
        # Each input's row among the searched, past the end ("") for an empty one.
        count = tf.size(prepared.rows)
        where = tf.tensor_scatter_nd_update(
            tf.fill([batch], count), prepared.rows[:, None], tf.range(count)
        )
        pairs = tf.gather(tf.concat([pairs, [""]], 0), where)  # [batch]
        return {**self._best(translations, scores), OUTPUT_ALIGNMENTS: pairs}

    def _sample(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._lists(*self._translate(inputs, self.tag_id, self.sample_config))

    @staticmethod
    def _best(translations: tf.Tensor, scores: tf.Tensor) -> dict[str, tf.Tensor]:
        return {OUTPUT_TRANSLATIONS: translations[:, 0], OUTPUT_SCORES: scores[:, 0]}

    @staticmethod
    def _lists(translations: tf.Tensor, scores: tf.Tensor) -> dict[str, tf.Tensor]:
        return {OUTPUT_TRANSLATIONS: translations, OUTPUT_SCORES: scores}

    def _tag_ids(self, inputs: tf.Tensor, tags: tf.Tensor) -> tf.Tensor:
        """The source id of each sentence's tag: int32 `[batch]`, -1 for none.

        Args:
            inputs: tf.string `[batch]`, the sentences (for the batch size).
            tags: tf.string `[batch]`: one of the vocabulary's tags, or "" for the
                export's own (`ExportConfig.tag`, or none).

        An unknown tag, or a tags vector of another length, fails the call with an
        InvalidArgument error.
        """
        lengths = tf.debugging.assert_equal(
            tf.shape(tags),
            tf.shape(inputs),
            message=f"'{TAGS_KEY}' must have one tag per sentence of '{INPUTS_KEY}'",
        )
        known = tf.constant(self.tags, tf.string)  # [k]
        matches = tf.equal(tags[:, None], known[None, :])  # [batch, k]
        found = tf.reduce_any(matches, axis=1)  # [batch]
        unknown = tf.logical_not(tf.logical_or(found, tf.equal(tags, "")))  # [batch]
        check = tf.debugging.Assert(
            tf.logical_not(tf.reduce_any(unknown)),
            [
                f"unknown tag (the model's tags: {', '.join(self.tags)}):",
                tf.boolean_mask(tags, unknown),
            ],
        )
        with tf.control_dependencies([lengths, check]):
            own = -1 if self.tag_id is None else self.tag_id
            ids = tf.gather(tf.constant(self.tag_ids, tf.int32), tf.argmax(matches, axis=1))
            return tf.where(found, ids, own)  # [batch]

    def _translate(
        self,
        inputs: tf.Tensor,
        tag_ids: int | tf.Tensor | None,
        config: SearchConfig,
        prefixes: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Translates a batch of sentences.

        Args:
            inputs: tf.string `[batch]`.
            tag_ids: The tag of every sentence (an id, or None), or of each (int32
                `[batch]`, -1 for none).
            config: The search settings.
            prefixes: tf.string `[batch]`, target prefixes to continue ("" for none).

        Returns:
            `(translations, scores)`: tf.string and float32 `[batch, n_best]`, best first;
            empty slots (fewer hypotheses than n_best) are "" with score -inf, and an empty
            sentence has the empty translation with score 0.0.
        """
        prepared = prepare(inputs, self.source_tokenizer, self.max_source_length, tag_ids)
        n_best = config.hypotheses
        prefix_ids = None
        if prefixes is not None:
            prefix_ids = target_prefixes(prefixes, self.target_tokenizer, prepared.rows)

        def decode() -> tuple[tf.Tensor, tf.Tensor]:
            result = search(self.model, prepared.source_ids, config, prefix_ids=prefix_ids)
            return result.ids, result.scores  # [searched, n, len], [searched, n]

        def nothing() -> tuple[tf.Tensor, tf.Tensor]:
            return tf.zeros([0, n_best, 1], tf.int32), tf.zeros([0, n_best], tf.float32)

        ids, scores = tf.cond(tf.size(prepared.rows) > 0, decode, nothing)
        return finish(ids, scores, prepared.rows, tf.shape(inputs)[0], self.target_tokenizer)


def _pharaoh_rows(links: tf.Tensor) -> tf.Tensor:
    """Links, bool `[rows, source words, target words]` -> "i-j i-j ..." per row, sorted."""
    found = tf.cast(tf.where(links), tf.int32)  # [pairs, 3]: row, i, j in row-major order
    pairs = tf.strings.join(
        [tf.strings.as_string(found[:, 1]), tf.strings.as_string(found[:, 2])], separator="-"
    )
    rows = tf.RaggedTensor.from_value_rowids(pairs, found[:, 0], nrows=tf.shape(links)[0])
    return tf.strings.reduce_join(rows, axis=1, separator=" ")  # [rows]


def next_version(export_base: str | os.PathLike[str]) -> int:
    """1 + the highest numeric version under `export_base` (1 for none)."""
    base = Path(export_base)
    versions = [int(p.name) for p in base.iterdir() if p.name.isdigit()] if base.is_dir() else []
    return max(versions, default=0) + 1


def export_model(
    model_dir: str | os.PathLike[str],
    export_base: str | os.PathLike[str],
    config: ExportConfig | None = None,
    version: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Exports a model directory (or a training run's final model) as a SavedModel.

    The version directory is written next to its final place and renamed into it when
    complete, so a server watching `export_base` never sees a half-written version.

    Args:
        model_dir: A model directory or a training run directory.
        export_base: The directory of versions (TF Serving's model base path).
        config: Search settings and source length limit.
        version: The version number; default: one more than the highest present.
        overwrite: Replace an existing version directory.

    Returns:
        The version directory, `export_base/<version>`.

    Raises:
        ExportError: a version that exists (without `overwrite`) or is not positive.
        translator.artifacts.ModelDirError: not a usable model directory.
    """
    from translator.artifacts import load_model_dir

    config = config or ExportConfig()
    if BACKEND != "tensorflow":  # a SavedModel is a TensorFlow graph: traced on TensorFlow
        return _export_on_tensorflow(model_dir, export_base, config, version, overwrite)
    base = Path(export_base)
    if base.exists() and not base.is_dir():
        raise ExportError(f"{base}: exists and is not a directory")
    version = next_version(base) if version is None else version
    if version < 1:
        raise ExportError(f"version must be a positive integer, got {version}")
    target = base / str(version)
    if target.exists() and not overwrite:
        raise ExportError(f"{target} already exists; pass --overwrite or another --version")

    trained = load_model_dir(model_dir)
    module = TranslationModule(trained.model.for_inference(), trained.vocabulary, config)
    # A dot-name is not a number, so TF Serving ignores it while it is being written.
    with atomic_directory(target, prefix=f".{version}.") as staging:
        # Serving never differentiates: skipping gradient functions saves most save time.
        options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
        with portable_layer_norms():  # TF Serving may run it on a GPU
            signatures = module.signatures()
            tf.saved_model.save(module, str(staging), signatures=signatures, options=options)
        metadata = _metadata(trained, module, version)
        (staging / "assets.extra").mkdir(exist_ok=True)
        (staging / "assets.extra" / METADATA_FILE).write_text(
            json.dumps(metadata, indent=2, default=str) + "\n"
        )
        input_keys = _signature_input_keys(staging, signatures)
        write_warmup_requests(warmup_path(staging), export_requests(input_keys))
    return target


def _export_on_tensorflow(
    model_dir, export_base, config: ExportConfig, version: int | None, overwrite: bool
) -> Path:
    """`export_model` in a child process whose Keras runs on TensorFlow.

    For a process on another Keras backend (a run trained on JAX): the model directory
    is the same on every backend, and the graph is traced from it there.
    """
    request = {
        "model_dir": str(model_dir),
        "export_base": str(export_base),
        "search": config.search.to_dict(),
        "max_source_length": config.max_source_length,
        "tag": config.tag,
        "sampling": config.sampling.to_dict() if config.sampling else None,
        "version": version,
        "overwrite": overwrite,
    }
    done = subprocess.run(
        [sys.executable, "-m", "translator.export", json.dumps(request)],
        env={**os.environ, "KERAS_BACKEND": "tensorflow"},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        raise ExportError(f"export on TensorFlow failed: {lines[-1]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _export_request(text: str) -> Path:
    """Runs one `_export_on_tensorflow` request (JSON) here; returns the version directory."""
    request = json.loads(text)
    sampling = request["sampling"]
    config = ExportConfig(
        search=SearchConfig.from_dict(request["search"]),
        max_source_length=request["max_source_length"],
        tag=request["tag"],
        sampling=SearchConfig.from_dict(sampling) if sampling else None,
    )
    return export_model(
        request["model_dir"],
        request["export_base"],
        config,
        request["version"],
        request["overwrite"],
    )


def _signature_input_keys(version_dir: Path, names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The input keys of the signatures `names`, as TF Serving reads them: saved_model.pb's."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel.FromString(
        (version_dir / "saved_model.pb").read_bytes()
    )
    signature_defs = saved_model.meta_graphs[0].signature_def
    return {name: tuple(sorted(signature_defs[name].inputs)) for name in names}


def _metadata(trained: TrainedModel, module: TranslationModule, version: int) -> dict[str, Any]:
    """What assets.extra/translator.json records: the settings fixed in the graph, the model."""
    return {
        "format": EXPORT_FORMAT,
        "version": version,
        "model_dir": str(trained.directory),
        "search": module.n_best_config.to_dict(),
        "max_source_length": module.max_source_length,
        "tag": module.tag,
        "tags": list(module.tags),
        "sampling": module.sample_config and module.sample_config.to_dict(),
        "signatures": describe_signatures(
            module.n_best_config.n_best,
            tagged=bool(module.tags),
            samples=module.sample_config and module.sample_config.num_samples,
        ),
        "vocabulary": {
            # Its file in assets/: the server counts a source's pieces with it.
            "source_model": Path(trained.vocabulary.metadata.source_model).name,
            "source_sha256": trained.vocabulary.source_sha256,
            "target_sha256": trained.vocabulary.target_sha256,
        },
        "model": trained.metadata,
    }


if __name__ == "__main__":  # `_export_on_tensorflow`'s child
    print(_export_request(sys.argv[1]))
