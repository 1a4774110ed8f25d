"""Export a trained model to CTranslate2, through its own converter API.

`export_ctranslate2` writes a CTranslate2 model directory (layout: `ctranslate2_files`)
with a `Converter` whose `_load` builds a `TransformerSpec` from our weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from translator.artifacts import VOCAB_DIR, TrainedModel
from translator.config import TransformerConfig
from translator.constants import BOS_ID, EOS_ID, UNK_ID
from translator.engines.base import CTRANSLATE2_QUANTIZATIONS
from translator.engines.ctranslate2_files import INFO_FILE, import_ctranslate2, vocabulary_pieces
from translator.errors import ConfigError
from translator.io import atomic_directory
from translator.text import default_max_source_length

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from ctranslate2.specs import TransformerSpec

    from translator.model import Transformer
    from translator.pipelines.vocabulary import Vocabulary

# Our feed-forward activations as CTranslate2's (`common_spec.Activation` names) and
# whether the unit is gated. Keras' gelu is the tanh approximation.
ACTIVATIONS = {
    "relu": ("RELU", False),
    "gelu": ("GELUTanh", False),
    "swiglu": ("SWISH", True),
    "swish": ("SWISH", False),
    "gelu_sigmoid": ("GELUSigmoid", False),
}
# Position encodings the converter writes (RoPE as non-interleaved halves, our layout).
POSITION_ENCODINGS = ("sinusoidal", "learned", "rotary")


def check_convertible(config: TransformerConfig) -> None:
    """Raises `ConfigError` naming the first field the converter cannot express (none today)."""
    convertible = {"activation": tuple(ACTIVATIONS), "position_encoding": POSITION_ENCODINGS}
    for field, values in convertible.items():
        value = getattr(config, field)
        if value not in values:
            raise ConfigError(
                f"cannot export to CTranslate2: {field} {value!r} has no CTranslate2 "
                f"equivalent in this converter (it converts {', '.join(values)})"
            )


def export_ctranslate2(
    trained: TrainedModel, out: str | Path, quantization: str = "float32"
) -> Path:
    """Writes a loaded model directory as a CTranslate2 model.

    Args:
        trained: The loaded model directory.
        out: The directory to write (replaced atomically if it exists).
        quantization: One of `CTRANSLATE2_QUANTIZATIONS`.

    Returns:
        The directory written.

    Raises:
        ConfigError: an unknown quantization, or a model CTranslate2 cannot express
            (before anything is written).
        CTranslate2NotInstalledError: the package is not installed.
    """
    if quantization not in CTRANSLATE2_QUANTIZATIONS:
        raise ConfigError(
            f"--quantization must be one of {CTRANSLATE2_QUANTIZATIONS}, got {quantization!r}"
        )
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
            "position_limit": default_max_source_length(config),
            # The decoder layer whose attention it returns (word alignments).
            "alignment_layer": alignment_layer(config),
            "metadata": trained.metadata,
        }
        (staging / INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
    return Path(out)


def alignment_layer(config) -> int:
    """Our alignment layer, from 0 (`translator.alignment.layer_index`)."""
    from translator.alignment import layer_index

    return layer_index(config.num_decoder_layers)


def transformer_spec(model: Transformer, vocabulary: Vocabulary) -> TransformerSpec:
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
        layernorm_embedding=config.embedding_norm,
    )
    if config.position_encoding == "rotary":  # all of each head, halves rotated together
        rotary = model.encoder_blocks[0].self_attention.rotary
        common.update(rotary_dim=0, rotary_interleave=False, rotary_base=rotary.max_wavelength)
    encoder = specs.TransformerEncoderSpec(config.num_encoder_layers, config.num_heads, **common)
    decoder = specs.TransformerDecoderSpec(
        config.num_decoder_layers,
        config.num_heads,
        # Its `return_attention`: our alignment layer, every head averaged.
        alignment_layer=alignment_layer(config),
        alignment_heads=config.num_heads,
        **common,
    )
    decoder.start_from_zero_embedding = config.zero_start_embedding
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
    if config.embedding_norm:
        _set_norm(encoder.layernorm_embedding, model.source_embedding_norm)
        _set_norm(decoder.layernorm_embedding, model.target_embedding_norm)
    if model.output_projection is None:  # tied: CTranslate2 stores the shared array once
        decoder.projection.weight = decoder.embeddings.weight
        if model.output_bias is not None:
            decoder.projection.bias = float32_values(model.output_bias)
    else:
        _set_linear(decoder.projection, model.output_projection)

    spec.register_source_vocabulary(vocabulary_pieces(vocabulary.source))
    spec.register_target_vocabulary(vocabulary_pieces(vocabulary.target))
    # The special pieces by our special ids, as this vocabulary spells them.
    unk, bos, eos = (vocabulary.target.id_to_piece(i) for i in (UNK_ID, BOS_ID, EOS_ID))
    spec.config.unk_token, spec.config.bos_token = unk, bos
    spec.config.eos_token, spec.config.decoder_start_token = eos, bos
    spec.config.add_source_eos = False  # our sources already end with EOS
    return spec


def float32_values(variable) -> np.ndarray:
    """A variable's or a tensor's values as float32 numpy, whatever the backend."""
    import keras
    import numpy as np

    return np.asarray(keras.ops.convert_to_numpy(variable), dtype=np.float32)


def _set_embeddings(side, embedding, positions, config: TransformerConfig) -> None:
    """Token table, sqrt(d_model) scale and the position table of one side."""
    table = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
    table.weight = float32_values(embedding.embeddings)  # [vocab, d_model]
    side.scale_embeddings = bool(embedding.scale)
    if positions is None:
        return
    if hasattr(positions, "position_embeddings"):  # learned: [max_length, d_model]
        side.position_encodings.encodings = float32_values(positions.position_embeddings)
    else:  # ours interleaves sin/cos per channel pair; CTranslate2's built-in does not
        encoding = positions.encoding(default_max_source_length(config), config.d_model)
        side.position_encodings.encodings = float32_values(encoding)


def _set_norm(spec, norm) -> None:
    spec.gamma, spec.beta = float32_values(norm.gamma), float32_values(norm.beta)


def _set_linear(spec, dense) -> None:
    """A Keras Dense (`[in, out]` kernel) as a CTranslate2 linear (`[out, in]` weight)."""
    spec.weight = float32_values(dense.kernel).T
    if dense.bias is not None:
        spec.bias = float32_values(dense.bias)


def _projection(einsum_dense, transpose: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """An attention projection as `([out, in] weight, bias)`.

    Query/key/value kernels `[d_model, heads, head_dim]` (`transpose=True`), the output
    kernel `[heads, head_dim, d_model]`; heads stay contiguous, CTranslate2's split.
    """
    kernel = float32_values(einsum_dense.kernel)
    if transpose:
        weight = kernel.reshape(kernel.shape[0], -1).T  # [heads * head_dim, d_model]
    else:
        weight = kernel.reshape(-1, kernel.shape[-1]).T  # [d_model, heads * head_dim]
    bias = None if einsum_dense.bias is None else float32_values(einsum_dense.bias).reshape(-1)
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
