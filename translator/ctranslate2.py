"""CTranslate2: export a trained model to it, and translate with it through our text path.

CTranslate2 (OpenNMT) is the inference engine people serve translation models with on
CPUs. `export_ctranslate2` writes a CTranslate2 model directory through its own
converter API (a `Converter` whose `_load` builds a `TransformerSpec` from our weights),
with our vocabulary beside it:

    OUT/model.bin, config.json, *vocabulary.json   CTranslate2's model
    OUT/vocab/                                      our SentencePiece vocabulary
    OUT/translator.json                             the model's TransformerConfig and facts

`CTranslate2Decoder` searches a batch of our source ids with it and returns a
`translator.search.SearchResult`, so `translator.inference.Translator` gives it the same
lines, tokenization, blank-line and truncation rules and output order as our own search
(`translate`, `evaluate`). Where CTranslate2's search differs from ours, the rule that
runs is CTranslate2's, and `rule_changes` says which (`translate` and `evaluate` print it):

- It stops a sentence when its best candidate of a step ends (our `--top-beam-stop`)
  with the length penalty 0, else once `beam_size` hypotheses have ended.
- Its length penalty is |Y| ** alpha (our `--length-penalty-form power`).
- Its length limit is one per call, not per sentence: it runs to the batch's largest of
  our per-sentence limits, and a hypothesis longer than its own limit is cut there,
  ended with EOS and rescored (greedy search then returns exactly our ids).
- It masks tokens before its softmax, renormalizing the others; ours never generates
  PAD or BOS (nor EOS before `min_length`) but scores with the model's own
  log-probabilities. So the search runs unmasked, and only the rare sentences where it
  produced such a token are searched again masked, then rescored our way.

The package is an optional extra: `pip install -e ".[ctranslate2]"`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from translator.artifacts import VOCAB_DIR, ModelDirError
from translator.config import TransformerConfig
from translator.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from translator.errors import ConfigError, TranslatorError
from translator.io import atomic_directory
from translator.search.config import SearchConfig

if TYPE_CHECKING:
    import numpy as np

# numpy, TensorFlow and ctranslate2 are imported where used: `translator export` reads
# QUANTIZATIONS from this module at every start of the command line.
# Weight types `export --format ctranslate2 --quantization` offers (CTranslate2's names).
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16")
# What marks a directory as ours: the TransformerConfig and facts of the export.
INFO_FILE = "translator.json"
# CTranslate2's weights file.
MODEL_BIN = "model.bin"
# Rows of the position table written for sinusoidal positions: our default source cut
# (`translator.text.default_max_source_length`), and the search's output cap.
SINUSOIDAL_POSITIONS = 1024


class CTranslate2NotInstalledError(TranslatorError):
    """The optional ctranslate2 package is not installed."""


def import_ctranslate2():
    """The ctranslate2 module, or a one-line error saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise CTranslate2NotInstalledError(
            'CTranslate2 is not installed: pip install -e ".[ctranslate2]" '
            "(or pip install ctranslate2)"
        ) from None
    return ctranslate2


# ---- Export ------------------------------------------------------------------------


# Our feed-forward activations as CTranslate2's (`common_spec.Activation` names) and
# whether the unit is gated. Keras' gelu is the tanh approximation.
ACTIVATIONS = {"relu": ("RELU", False), "gelu": ("GELUTanh", False), "swiglu": ("SWISH", True)}
# Position encodings the converter writes: a table for the absolute ones, CTranslate2's
# rotary embeddings (non-interleaved halves, our layout) for RoPE.
POSITION_ENCODINGS = ("sinusoidal", "learned", "rotary")


def check_convertible(config: TransformerConfig) -> None:
    """Raises `ConfigError` naming the first field the converter cannot express.

    Every value `TransformerConfig` accepts today converts: pre/post-norm, shared and
    tied embeddings, ReLU, GELU and SwiGLU, sinusoidal, learned and rotary positions, the
    sqrt(d_model) embedding scale, the LayerNorm epsilon. A value added to the config
    later fails here, before anything is written, until the converter learns it.
    """
    convertible = {"activation": tuple(ACTIVATIONS), "position_encoding": POSITION_ENCODINGS}
    for field, values in convertible.items():
        value = getattr(config, field)
        if value not in values:
            raise ConfigError(
                f"cannot export to CTranslate2: {field} {value!r} has no CTranslate2 "
                f"equivalent in this converter (it converts {', '.join(values)})"
            )


def export_ctranslate2(trained: Any, out: str | Path, quantization: str = "float32") -> Path:
    """Writes `trained` (a loaded `translator.artifacts.TrainedModel`) as a CTranslate2 model.

    Args:
        trained: The loaded model directory.
        out: The directory to write (replaced atomically if it exists).
        quantization: One of `QUANTIZATIONS`.

    Returns:
        The directory written.

    Raises:
        ConfigError: an unknown quantization, or a model CTranslate2 cannot express
            (before anything is written).
        CTranslate2NotInstalledError: the package is not installed.
    """
    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"--quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    config = trained.model.config
    check_convertible(config)
    ctranslate2 = import_ctranslate2()

    class KerasConverter(ctranslate2.converters.Converter):
        def _load(self):
            return transformer_spec(trained.model, trained.vocabulary)

    with atomic_directory(out) as staging:
        # CTranslate2 refuses an existing directory without `force`; ours is fresh.
        KerasConverter().convert(str(staging), quantization=quantization, force=True)
        shutil.copytree(trained.vocabulary.directory, staging / VOCAB_DIR)
        info = {
            "format": "ctranslate2",
            "quantization": quantization,
            "ctranslate2_version": ctranslate2.__version__,
            "model_config": config.to_dict(),
            "position_limit": position_limit(config),
            "metadata": trained.metadata,
        }
        (staging / INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
    return Path(out)


def position_limit(config: TransformerConfig) -> int:
    """Positions the exported position table covers (so the longest source or output)."""
    return config.max_length if config.position_encoding == "learned" else SINUSOIDAL_POSITIONS


def transformer_spec(model: Any, vocabulary: Any) -> Any:
    """CTranslate2's `TransformerSpec` holding `model`'s weights, in its layouts.

    Args:
        model: A built `translator.model.Transformer`.
        vocabulary: Its `translator.pipelines.Vocabulary`.

    Returns:
        A `ctranslate2.specs.TransformerSpec` with every variable set.
    """
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as specs

    config = model.config
    activation, glu = ACTIVATIONS[config.activation]
    common = dict(
        pre_norm=config.norm_first,
        activation=getattr(common_spec.Activation, activation),
        ffn_glu=glu,
    )
    if config.position_encoding == "rotary":  # all of each head, halves rotated together
        rotary = model.encoder_blocks[0].self_attention.rotary
        common.update(rotary_dim=0, rotary_interleave=False, rotary_base=rotary.max_wavelength)
    encoder = specs.TransformerEncoderSpec(config.num_encoder_layers, config.num_heads, **common)
    decoder = specs.TransformerDecoderSpec(config.num_decoder_layers, config.num_heads, **common)
    spec = specs.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = config.layer_norm_epsilon

    _set_embeddings(encoder, model.source_embedding, model.source_positions, config)
    _set_embeddings(decoder, model.target_embedding, model.target_positions, config)
    for layer, block in zip(encoder.layer, model.encoder_blocks, strict=True):
        _set_self_attention(layer.self_attention, block.self_attention, block.self_attention_norm)
        _set_feed_forward(layer.ffn, block.feed_forward, block.feed_forward_norm)
    for layer, block in zip(decoder.layer, model.decoder_blocks, strict=True):
        _set_self_attention(layer.self_attention, block.self_attention, block.self_attention_norm)
        _set_cross_attention(layer.attention, block.cross_attention, block.cross_attention_norm)
        _set_feed_forward(layer.ffn, block.feed_forward, block.feed_forward_norm)
    if config.norm_first:
        _set_norm(encoder.layer_norm, model.encoder_norm)
        _set_norm(decoder.layer_norm, model.decoder_norm)
    if model.output_projection is None:  # tied: CTranslate2 stores the shared array once
        decoder.projection.weight = decoder.embeddings.weight
    else:
        _set_linear(decoder.projection, model.output_projection)

    spec.register_source_vocabulary(_pieces(vocabulary.source))
    spec.register_target_vocabulary(_pieces(vocabulary.target))
    # The special pieces by our special ids, as this vocabulary spells them.
    unk, bos, eos = (vocabulary.target.id_to_piece(i) for i in (UNK_ID, BOS_ID, EOS_ID))
    spec.config.unk_token, spec.config.bos_token = unk, bos
    spec.config.eos_token, spec.config.decoder_start_token = eos, bos
    spec.config.add_source_eos = False  # our sources already end with EOS
    return spec


def _array(variable) -> np.ndarray:
    import numpy as np

    return np.asarray(variable.numpy(), dtype=np.float32)


def _set_embeddings(side, embedding, positions, config: TransformerConfig) -> None:
    """Token table, sqrt(d_model) scale and the position table of one side."""
    table = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
    table.weight = _array(embedding.embeddings)  # [vocab, d_model]
    side.scale_embeddings = bool(embedding.scale)
    if positions is None:
        return
    if hasattr(positions, "position_embeddings"):  # learned: [max_length, d_model]
        side.position_encodings.encodings = _array(positions.position_embeddings)
    else:  # ours interleaves sin/cos per channel pair; CTranslate2's built-in does not
        encoding = positions.encoding(position_limit(config), config.d_model)
        side.position_encodings.encodings = _array(encoding)


def _set_norm(spec, norm) -> None:
    spec.gamma, spec.beta = _array(norm.gamma), _array(norm.beta)


def _set_linear(spec, dense) -> None:
    """A Keras Dense (`[in, out]` kernel) as a CTranslate2 linear (`[out, in]` weight)."""
    spec.weight = _array(dense.kernel).T
    if dense.bias is not None:
        spec.bias = _array(dense.bias)


def _projection(einsum_dense, transpose: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """An attention projection as `([out, in] weight, bias)`.

    Query/key/value kernels are `[d_model, heads, head_dim]` (`transpose=True` gives
    `[heads * head_dim, d_model]`); the output kernel is `[heads, head_dim, d_model]`.
    Heads stay contiguous along the flattened axis, CTranslate2's split.
    """
    kernel = _array(einsum_dense.kernel)
    if transpose:
        weight = kernel.reshape(kernel.shape[0], -1).T  # [heads * head_dim, d_model]
    else:
        weight = kernel.reshape(-1, kernel.shape[-1]).T  # [d_model, heads * head_dim]
    bias = None if einsum_dense.bias is None else _array(einsum_dense.bias).reshape(-1)
    return weight, bias


def _set_fused(spec, projections) -> None:
    """One CTranslate2 linear of several input projections stacked along the output."""
    import numpy as np

    parts = [_projection(layer, transpose=True) for layer in projections]
    spec.weight = np.concatenate([weight for weight, _ in parts])
    if parts[0][1] is not None:
        spec.bias = np.concatenate([bias for _, bias in parts])


def _set_output(spec, attention) -> None:
    spec.weight, bias = _projection(attention.output_dense, transpose=False)
    if bias is not None:
        spec.bias = bias


def _set_self_attention(spec, attention, norm) -> None:
    _set_norm(spec.layer_norm, norm)
    _set_fused(spec.linear[0], (attention.query_dense, attention.key_dense, attention.value_dense))
    _set_output(spec.linear[1], attention)


def _set_cross_attention(spec, attention, norm) -> None:
    _set_norm(spec.layer_norm, norm)
    _set_fused(spec.linear[0], (attention.query_dense,))
    _set_fused(spec.linear[1], (attention.key_dense, attention.value_dense))
    _set_output(spec.linear[2], attention)


def _set_feed_forward(spec, feed_forward, norm) -> None:
    _set_norm(spec.layer_norm, norm)
    if feed_forward.gate_dense is not None:  # SwiGLU: silu(gate x) * (inner x)
        _set_linear(spec.linear_0, feed_forward.gate_dense)
        _set_linear(spec.linear_0_noact, feed_forward.inner_dense)
    else:
        _set_linear(spec.linear_0, feed_forward.inner_dense)
    _set_linear(spec.linear_1, feed_forward.outer_dense)


def _pieces(tokenizer) -> list[str]:
    """The pieces of a SentencePiece tokenizer, by id (CTranslate2 works on pieces)."""
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


# ---- Decoding ----------------------------------------------------------------------


def is_ctranslate2_dir(path: str | Path) -> bool:
    """True for a directory written by `export_ctranslate2`."""
    path = Path(path)
    return (path / INFO_FILE).is_file() and (path / MODEL_BIN).is_file()


def check_ctranslate2_dir(path: str | Path) -> Path:
    """The directory, or `ModelDirError` saying what is missing."""
    path = Path(path)
    for name in (MODEL_BIN, INFO_FILE, VOCAB_DIR):
        if not (path / name).exists():
            raise ModelDirError(
                f"{path}: not a CTranslate2 export of `translator export --format "
                f"ctranslate2` (no {name})"
            )
    return path


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

    # `ctranslate2.Translator`.
    engine: Any
    # `translator.pipelines.Vocabulary` (the export's vocab/).
    vocabulary: Any
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


def load_ctranslate2(path: str | Path, threads: int = 0) -> CTranslate2Model:
    """Loads an export directory on the CPU.

    Args:
        path: A directory written by `export_ctranslate2`.
        threads: Threads of one translation (CTranslate2's intra_threads; 0 = all cores).

    Raises:
        ModelDirError, CTranslate2NotInstalledError.
    """
    from translator.pipelines.tokenizer import load_vocabulary

    directory = check_ctranslate2_dir(path)
    ctranslate2 = import_ctranslate2()
    info = json.loads((directory / INFO_FILE).read_text())
    engine = ctranslate2.Translator(str(directory), device="cpu", intra_threads=threads)
    vocabulary = load_vocabulary(directory / VOCAB_DIR)
    return CTranslate2Model(engine, vocabulary, info, directory)


class CTranslate2Decoder:
    """Searches batches of our source ids with CTranslate2; a `Translator` decoder.

    Args:
        model: The loaded `CTranslate2Model`.
        config: The search settings; CTranslate2 runs `engine_config(config)`.
    """

    def __init__(self, model: CTranslate2Model, config: SearchConfig):
        self.model = model
        self.config = engine_config(config)
        self.position_limit = int(model.info["position_limit"])
        self.jit_compile = False  # what reports read of a decoder
        self.engine = "ctranslate2"
        self._source_pieces = _pieces(model.vocabulary.source)
        target = _pieces(model.vocabulary.target)
        self._target_ids = {piece: i for i, piece in enumerate(target)}
        self._pad, self._bos, self._eos = (target[i] for i in (PAD_ID, BOS_ID, EOS_ID))

    def __call__(self, source_ids) -> Any:
        """Translates int32 `[batch, width]` sources (EOS ended, 0 = padding).

        Returns:
            A `SearchResult` of numpy arrays, as `translator.search.Decoder` returns.
        """
        import numpy as np
        import tensorflow as tf

        from translator.search.common import SearchResult, output_length_limits

        limits, _ = output_length_limits(
            tf.constant(source_ids, tf.int32), self.config, self.position_limit
        )  # [batch], ours: the same rule as our search's
        limits = limits.numpy()
        source_ids = np.asarray(source_ids)
        lengths = np.sum(source_ids != PAD_ID, axis=1)  # [batch], EOS included
        sources = [
            [self._source_pieces[i] for i in row[:length]]
            for row, length in zip(source_ids, lengths, strict=True)
        ]
        results = self._search(sources, int(limits.max()), masked=False)
        # Where the unmasked search produced what ours never does, search again with
        # CTranslate2's masks (rare in a trained model; see `_search`).
        redo = [i for i, result in enumerate(results) if not self._allowed(result.hypotheses)]
        if redo:
            again = self._search([sources[i] for i in redo], int(limits.max()), masked=True)
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
        return _search_result(hypotheses, self.config.n_best, SearchResult)

    def _search(self, sources: list[list[str]], max_length: int, masked: bool) -> list:
        """CTranslate2's search of `sources` (pieces), at most `max_length` tokens each.

        Unmasked, its scores are ours: log-softmax over the whole vocabulary. Masked, PAD,
        BOS and EOS before `min_length` cannot be generated, but CTranslate2 masks them
        before its softmax, so its log-probabilities are renormalized over the other
        tokens (ours are not): it is the fallback for the few sentences that need it.
        """
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
        """`[ids (EOS ended), score, rescore]` of one CTranslate2 hypothesis.

        `rescore`: cut at its limit (its score lacks EOS), so `_rescore` must score it.
        """
        ids = [self._target_ids[piece] for piece in pieces]
        cut = len(ids) > limit or (ids[-1:] != [EOS_ID] and len(ids) >= limit)
        if cut or ids[-1:] != [EOS_ID]:
            ids = [*ids[: limit - 1], EOS_ID]  # ours forces EOS at the limit
        return [ids, float(score), cut]

    def _rescore(self, sources: list[list[str]], hypotheses: list[list[list]]) -> None:
        """Scores the hypotheses marked `rescore` as ours does, best first again.

        log P over the whole vocabulary, EOS included, by CTranslate2's teacher-forced
        `score_batch`: for a hypothesis cut at its length limit (whose search score lacks
        the EOS forced there) and for those of a masked search (renormalized).
        """
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


def _search_result(hypotheses: list[list[list]], n_best: int, result_type) -> Any:
    """Per-sentence `[ids, score, cut]` lists as a `SearchResult` of numpy arrays."""
    import numpy as np

    batch = len(hypotheses)
    width = max((len(h[0]) for row in hypotheses for h in row), default=1)
    ids = np.full((batch, n_best, width), PAD_ID, np.int32)  # [batch, n_best, length]
    scores = np.full((batch, n_best), -math.inf, np.float32)  # [batch, n_best]
    lengths = np.zeros((batch, n_best), np.int32)  # [batch, n_best]
    for i, row in enumerate(hypotheses):
        for k, (tokens, score, _) in enumerate(row[:n_best]):
            ids[i, k, : len(tokens)] = tokens
            scores[i, k], lengths[i, k] = score, len(tokens)
    return result_type(ids=ids, scores=scores, lengths=lengths)
