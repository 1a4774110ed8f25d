"""Translate with a CTranslate2 export through our text path.

`CTranslate2Decoder` returns a `SearchResult`, so `Translator` applies our text rules.
Its stop rule and length penalty are its own (`rule_changes` says which). A hypothesis
over its sentence's limit is cut and rescored; CTranslate2 renormalizes what it masks, so
it runs unmasked and only sentences with PAD, BOS or an early EOS are searched again.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from translator.artifacts import VOCAB_DIR
from translator.config import TransformerConfig
from translator.constants import BOS_ID, EOS_ID, PAD_ID
from translator.engines.base import CTRANSLATE2_REPLICAS, usable_cores
from translator.engines.ctranslate2_files import (
    INFO_FILE,
    MODEL_BIN,
    check_ctranslate2_dir,
    import_ctranslate2,
    vocabulary_pieces,
)
from translator.pipelines.vocabulary import Vocabulary
from translator.search.common import SearchResult
from translator.search.config import SearchConfig

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf


def engine_config(config: SearchConfig) -> SearchConfig:
    """The search CTranslate2 runs for `config`: its stop rule and length penalty form."""
    return dataclasses.replace(config, exact_stop=False, length_penalty_form="power")


def rule_changes(config: SearchConfig) -> list[str]:
    """What CTranslate2 runs differently from `config`, one phrase each ([] if nothing)."""
    changes = []
    if config.beam_size > 1 and config.length_penalty > 0:
        changes.append(
            f"its own stop (a sentence ends once {config.beam_size} hypotheses have ended; "
            "with --length-penalty 0 it is our --top-beam-stop)"
        )
    elif config.beam_size > 1 and config.exact_stop:
        changes.append("the top-beam stop (--top-beam-stop), not the exact stop")
    if config.length_penalty_form != "power" and config.length_penalty != 0:
        changes.append(
            f"the length penalty length ** {config.length_penalty} "
            "(--length-penalty-form power), not GNMT's"
        )
    return changes


@dataclasses.dataclass
class CTranslate2Model:
    """A loaded CTranslate2 export (what `translator.artifacts.TrainedModel` is for ours)."""

    # `ctranslate2.Translator` (the package has no type annotations).
    engine: Any
    # The export's vocab/.
    vocabulary: Vocabulary
    # Contents of translator.json.
    info: dict[str, Any]
    # The export directory.
    directory: Path

    @property
    def model_config(self) -> TransformerConfig:
        """The exported model's architecture."""
        return TransformerConfig.from_dict(self.info["model_config"])

    @property
    def metadata(self) -> dict[str, Any]:
        """The source model's metadata.json, with the export's facts added."""
        facts = {k: v for k, v in self.info.items() if k not in ("model_config", "metadata")}
        return {**self.info.get("metadata", {}), "ctranslate2": facts}

    @property
    def model_file(self) -> Path:
        """The weights file (for the report's checksum)."""
        return self.directory / MODEL_BIN


def load_ctranslate2(
    path: str | Path, threads: int = 0, replicas: int = CTRANSLATE2_REPLICAS
) -> CTranslate2Model:
    """Loads an export directory on the CPU.

    Args:
        path: A directory written by `export_ctranslate2`.
        threads: Threads of one replica (CTranslate2's intra_threads); 0: the cores this
            process may use, shared out among the replicas.
        replicas: Batches it translates at once (CTranslate2's inter_threads), as many as
            a `Translator` sends.

    Raises:
        ModelDirError, CTranslate2NotInstalledError.
    """
    from translator.pipelines.vocabulary import load_vocabulary

    directory = check_ctranslate2_dir(path)
    ctranslate2 = import_ctranslate2()
    info = json.loads((directory / INFO_FILE).read_text())
    threads = threads or max(1, usable_cores() // replicas)
    engine = ctranslate2.Translator(
        str(directory), device="cpu", inter_threads=replicas, intra_threads=threads
    )
    vocabulary = load_vocabulary(directory / VOCAB_DIR)
    return CTranslate2Model(engine, vocabulary, info, directory)


class CTranslate2Decoder:
    """Searches batches of our source ids with CTranslate2; a `Translator` decoder.

    Args:
        model: The loaded `CTranslate2Model`.
        config: The search settings; CTranslate2 runs `engine_config(config)`.
    """

    def __init__(self, model: CTranslate2Model, config: SearchConfig):
        if config.sampled:
            from translator.errors import ConfigError

            raise ConfigError(
                "--sampling runs on our engine only (--engine tensorflow with a model "
                "directory): CTranslate2's sampler has other rules and another random source"
            )
        self.model = model
        self.config = engine_config(config)
        self.position_limit = int(model.info["position_limit"])
        self.engine = "ctranslate2"
        self._source_pieces = vocabulary_pieces(model.vocabulary.source)
        target = vocabulary_pieces(model.vocabulary.target)
        self._target_ids = {piece: i for i, piece in enumerate(target)}
        self._target_pieces = target
        self._pad, self._bos, self._eos = (target[i] for i in (PAD_ID, BOS_ID, EOS_ID))

    @property
    def model_config(self) -> TransformerConfig:
        """The exported model's architecture."""
        return self.model.model_config

    def describe(self) -> dict[str, Any]:
        """The export's weight type and CTranslate2 version, for a report."""
        info = self.model.info
        return {"quantization": info["quantization"], "version": info["ctranslate2_version"]}

    def cross_attention(self, source_ids, target_ids) -> np.ndarray:
        """CTranslate2's own attention over given translations, forced as target prefixes.

        From the layer the export names (`alignment_layer`), every head averaged: our
        alignment layer. Row t is the step that predicts piece t.

        Raises:
            ConfigError: an export written before alignments (its layer unknown).
        """
        from translator.alignment import SHIFTED
        from translator.errors import ConfigError

        if "alignment_layer" not in self.model.info:
            raise ConfigError(
                f"{self.model.directory}: this CTranslate2 export does not say which layer's "
                "attention it returns; export it again (translator export --format "
                "ctranslate2) for --alignments"
            )
        source_ids, target_ids = np.asarray(source_ids), np.asarray(target_ids)
        source_lengths = np.sum(source_ids != PAD_ID, axis=1)  # EOS included
        sources = [
            [self._source_pieces[i] for i in row[:length]]
            for row, length in zip(source_ids, source_lengths, strict=True)
        ]
        prefixes = [
            [self._target_pieces[t] for t in row if t not in (PAD_ID, EOS_ID)] for row in target_ids
        ]
        results = self.model.engine.translate_batch(
            sources,
            target_prefix=prefixes,
            beam_size=1,
            max_input_length=0,
            max_decoding_length=max(len(prefix) for prefix in prefixes) + 1,
            min_decoding_length=0,
            return_attention=True,
        )
        weights = np.zeros((*target_ids.shape, source_ids.shape[1]), np.float32)
        for row, (result, prefix) in enumerate(zip(results, prefixes, strict=True)):
            steps = np.asarray(result.attention[0], np.float32)  # [steps, source length]
            steps = steps[1 : len(prefix) + 2] if SHIFTED else steps[: len(prefix) + 1]
            weights[row, : len(steps), : steps.shape[1]] = steps
        return weights

    def __call__(
        self, source_ids: tf.Tensor | np.ndarray, prefix_ids: tf.Tensor | np.ndarray | None = None
    ) -> SearchResult:
        """Translates int32 `[batch, width]` sources (EOS ended, 0 = padding).

        `prefix_ids`: int32 `[batch, prefix width]` target prefixes (then PAD), given to
        CTranslate2 as `target_prefix`.

        Returns:
            A `SearchResult` of numpy arrays, as `translator.search.Decoder` returns.
        """
        import tensorflow as tf

        from translator.search.common import output_length_limits

        limits, _ = output_length_limits(
            tf.constant(source_ids, tf.int32), self.config, self.position_limit
        )  # [batch], ours: the same rule as our search's
        limits = np.asarray(limits)  # (a backend's tensor: Keras' ops compute it)
        prefixes = None
        if prefix_ids is not None:
            prefix_ids = np.asarray(prefix_ids)[:, : self.position_limit - 1]
            prefixes = [[self._target_pieces[t] for t in row if t != PAD_ID] for row in prefix_ids]
            limits = np.maximum(limits, [len(prefix) + 1 for prefix in prefixes])
        source_ids = np.asarray(source_ids)
        lengths = np.sum(source_ids != PAD_ID, axis=1)  # [batch], EOS included
        sources = [
            [self._source_pieces[i] for i in row[:length]]
            for row, length in zip(source_ids, lengths, strict=True)
        ]
        results = self._search(sources, int(limits.max()), False, prefixes)
        # Where the unmasked search produced what ours never does, search again masked.
        redo = [i for i, result in enumerate(results) if not self._allowed(result.hypotheses)]
        if redo:
            again = self._search(
                [sources[i] for i in redo],
                int(limits.max()),
                True,
                None if prefixes is None else [prefixes[i] for i in redo],
            )
            for i, result in zip(redo, again, strict=True):
                results[i] = result
        hypotheses = [
            [self._hypothesis(h, s, limit) for h, s in zip(r.hypotheses, r.scores, strict=True)]
            for r, limit in zip(results, limits, strict=True)
        ]
        for i in redo:  # renormalized scores: score those hypotheses as ours does
            for hypothesis in hypotheses[i]:
                hypothesis[2] = True
        self._rescore(sources, hypotheses)
        return _search_result(hypotheses, self.config.n_best)

    def _search(
        self,
        sources: list[list[str]],
        max_length: int,
        masked: bool,
        prefixes: list[list[str]] | None = None,
    ) -> list:
        """CTranslate2's search of `sources` (pieces); `masked`: the renormalizing fallback."""
        config = self.config
        masks = dict(min_decoding_length=0)
        if masked:
            masks = dict(
                min_decoding_length=config.min_length,
                suppress_sequences=[[self._pad], [self._bos]],
            )
        return self.model.engine.translate_batch(
            sources,
            beam_size=config.beam_size,
            num_hypotheses=config.n_best,
            length_penalty=config.length_penalty,
            max_input_length=0,  # our sources are cut already (`max_source_length`)
            max_decoding_length=max_length,
            target_prefix=prefixes,
            return_scores=True,
            return_end_token=True,
            **masks,
        )

    def _allowed(self, hypotheses: list[list[str]]) -> bool:
        """True if no hypothesis has PAD or BOS, or ends before `min_length` tokens."""
        shortest = self.config.min_length + 1  # tokens before EOS, then EOS
        return all(
            self._pad not in pieces
            and self._bos not in pieces
            and (len(pieces) >= shortest or pieces[-1:] != [self._eos])
            for pieces in hypotheses
        )

    def _hypothesis(self, pieces: list[str], score: float, limit: int) -> list:
        """`[ids (EOS ended), score, rescore]`; `rescore`: cut at its limit, score lacks EOS."""
        ids = [self._target_ids[piece] for piece in pieces]
        cut = len(ids) > limit or (ids[-1:] != [EOS_ID] and len(ids) >= limit)
        if cut or ids[-1:] != [EOS_ID]:
            ids = [*ids[: limit - 1], EOS_ID]  # ours forces EOS at the limit
        return [ids, float(score), cut]

    def _rescore(self, sources: list[list[str]], hypotheses: list[list[list]]) -> None:
        """Scores the hypotheses marked `rescore` as ours does (`score_batch`), best first."""
        cut = [(i, k) for i, row in enumerate(hypotheses) for k, h in enumerate(row) if h[2]]
        if not cut:
            return
        pieces = list(self._target_ids)
        # score_batch adds the start and end tokens itself: give the pieces before EOS.
        targets = [[pieces[t] for t in hypotheses[i][k][0][:-1]] for i, k in cut]
        scored = self.model.engine.score_batch([sources[i] for i, _ in cut], targets)
        alpha = self.config.length_penalty
        for (i, k), result in zip(cut, scored, strict=True):
            length = len(hypotheses[i][k][0])
            hypotheses[i][k][1] = float(sum(result.log_probs)) / length**alpha
        for i in {i for i, _ in cut}:
            hypotheses[i].sort(key=lambda hypothesis: -hypothesis[1])


def _search_result(hypotheses: list[list[list]], n_best: int) -> SearchResult:
    """Per-sentence `[ids, score, cut]` lists as a `SearchResult` of numpy arrays."""
    batch = len(hypotheses)
    width = max((len(h[0]) for row in hypotheses for h in row), default=1)
    ids = np.full((batch, n_best, width), PAD_ID, np.int32)  # [batch, n_best, length]
    scores = np.full((batch, n_best), -math.inf, np.float32)  # [batch, n_best]
    lengths = np.zeros((batch, n_best), np.int32)  # [batch, n_best]
    for i, row in enumerate(hypotheses):
        for k, (tokens, score, _) in enumerate(row[:n_best]):
            ids[i, k, : len(tokens)] = tokens
            scores[i, k], lengths[i, k] = score, len(tokens)
    return SearchResult(ids=ids, scores=scores, lengths=lengths)
