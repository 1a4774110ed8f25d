"""A model directory of ours -> a Marian model as OPUS-MT ships it (the import's inverse).

Marian's format holds what Marian's transformer has, so only such models export: ReLU,
Swish or GELU-sigmoid, Marian's sinusoid table (or learned positions), a zero start
embedding (`zero_start_embedding`), post-norm or pre-norm. `check_exportable` names every
other setting before anything is written. Marian's vocabulary is ours without PAD and
BOS (`</s>` 0, `<unk>` 1, then our pieces from id 4); the SentencePiece models are ours,
as Marian and CTranslate2 look pieces up by their text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from translator.constants import EOS_ID, UNK_ID
from translator.engines.ctranslate2_export import float32_values as _array
from translator.marian.files import OPTIONS_KEY, MarianImportError

if TYPE_CHECKING:  # pragma: no cover
    from translator.artifacts import TrainedModel
    from translator.config import TransformerConfig

MODEL_FILE, VOCAB_FILE = "model.npz", "vocab.yml"
# Our activations as Marian's `--transformer-ffn-activation`.
ACTIVATIONS = {"relu": "relu", "swish": "swish", "gelu_sigmoid": "gelu"}


def check_exportable(config: TransformerConfig) -> None:
    """Raises `MarianImportError` naming every setting Marian's transformer lacks."""
    problems = []
    if config.activation not in ACTIVATIONS:
        problems.append(f"activation {config.activation!r} (Marian: relu, swish, gelu_sigmoid)")
    if config.position_encoding == "rotary":
        problems.append("rotary positions")
    if config.position_encoding == "sinusoidal" and config.sinusoid_layout != "marian":
        problems.append("the paper's sinusoids (Marian has its own: sinusoid_layout marian)")
    if not config.zero_start_embedding:
        problems.append("a BOS start embedding (Marian starts from zeros: zero_start_embedding)")
    if problems:
        raise MarianImportError("cannot export to Marian: " + "; ".join(problems))


def _marian_ids(vocab_size: int) -> np.ndarray:
    """Our id of each Marian id: EOS, UNK, then ours from 4 (PAD and BOS are not Marian's)."""
    return np.array([EOS_ID, UNK_ID, *range(4, vocab_size)])


def _params(model) -> dict[str, np.ndarray]:
    """Our weights under Marian's names (the inverse of `translator.marian.weights`)."""
    params: dict[str, np.ndarray] = {}
    _blocks(params, model)
    _embeddings(params, model)
    _positions(params, model)
    return params


def _norm(params: dict, layer, scope: str, pre: bool) -> None:
    """A layer norm's scale and bias (`_pre`: one that comes before what it normalizes)."""
    suffix = "_pre" if pre else ""
    params[f"{scope}_ln_scale{suffix}"] = _array(layer.gamma)[None, :]
    params[f"{scope}_ln_bias{suffix}"] = _array(layer.beta)[None, :]


def _attention(params: dict, layer, layer_norm, scope: str, norm_first: bool) -> None:
    """One attention's projections, heads flattened, and its norm."""
    for suffix, dense in (
        ("q", layer.query_dense),
        ("k", layer.key_dense),
        ("v", layer.value_dense),
    ):
        kernel = _array(dense.kernel)
        params[f"{scope}_W{suffix}"] = kernel.reshape(kernel.shape[0], -1)
        params[f"{scope}_b{suffix}"] = _array(dense.bias).reshape(1, -1)
    kernel = _array(layer.output_dense.kernel)
    params[f"{scope}_Wo"] = kernel.reshape(-1, kernel.shape[-1])
    params[f"{scope}_bo"] = _array(layer.output_dense.bias)[None, :]
    _norm(params, layer_norm, f"{scope}_Wo", norm_first)


def _feed_forward(params: dict, layer, layer_norm, scope: str, norm_first: bool) -> None:
    """One feed-forward's two layers and its norm."""
    for suffix, dense in (("1", layer.inner_dense), ("2", layer.outer_dense)):
        params[f"{scope}_W{suffix}"] = _array(dense.kernel)
        params[f"{scope}_b{suffix}"] = _array(dense.bias)[None, :]
    _norm(params, layer_norm, f"{scope}_ffn", norm_first)


def _blocks(params: dict, model) -> None:
    """The encoder's and decoder's blocks, and the norms above and below them."""
    config, first = model.config, model.config.norm_first
    for i, block in enumerate(model.encoder_blocks, start=1):
        scope = f"encoder_l{i}"
        _attention(params, block.self_attention, block.self_attention_norm, f"{scope}_self", first)
        _feed_forward(params, block.feed_forward, block.feed_forward_norm, f"{scope}_ffn", first)
    for i, block in enumerate(model.decoder_blocks, start=1):
        scope = f"decoder_l{i}"
        _attention(params, block.self_attention, block.self_attention_norm, f"{scope}_self", first)
        cross, cross_norm = block.cross_attention, block.cross_attention_norm
        _attention(params, cross, cross_norm, f"{scope}_context", first)
        _feed_forward(params, block.feed_forward, block.feed_forward_norm, f"{scope}_ffn", first)
    if config.norm_first:
        _norm(params, model.encoder_norm, "encoder_top", False)
        _norm(params, model.decoder_norm, "decoder_top", False)
    if config.embedding_norm:
        _norm(params, model.source_embedding_norm, "encoder_emb", True)
        _norm(params, model.target_embedding_norm, "decoder_emb", True)


def _embeddings(params: dict, model) -> None:
    """The embedding tables and the output layer, in Marian's id order."""
    config = model.config
    source_rows = _marian_ids(config.source_vocab_size)
    target_rows = _marian_ids(config.target_vocab_size)
    source_table = _array(model.source_embedding.embeddings)[source_rows]
    if config.share_embeddings:
        params["Wemb"] = source_table
    else:
        params["encoder_Wemb"] = source_table
        params["decoder_Wemb"] = _array(model.target_embedding.embeddings)[target_rows]
    if model.output_projection is not None:
        params["decoder_ff_logit_out_W"] = _array(model.output_projection.kernel)[:, target_rows]
        bias = _array(model.output_projection.bias)[None, target_rows]
    elif model.output_bias is not None:
        bias = _array(model.output_bias)[None, target_rows]
    else:
        bias = np.zeros((1, len(target_rows)), np.float32)
    params["decoder_ff_logit_out_b"] = bias


def _positions(params: dict, model) -> None:
    """Learned position tables (sinusoids are computed, not stored)."""
    if model.config.position_encoding != "learned":
        return
    source = _array(model.source_positions.position_embeddings)
    target = _array(model.target_positions.position_embeddings)
    if np.array_equal(source, target):  # Marian's one table, where both sides agree
        params["Wpos"] = source
    else:  # ours: read back by our import (CTranslate2's converter reads `Wpos` only)
        params["encoder_Wpos"], params["decoder_Wpos"] = source, target


def _options(config: TransformerConfig) -> dict:
    tied = "target" if config.tie_output_projection else "none"
    if config.share_embeddings:
        tied = "all" if config.tie_output_projection else "source"
    return {
        "type": "transformer",
        "dim-emb": config.d_model,
        "dim-vocabs": [config.source_vocab_size - 2, config.target_vocab_size - 2],
        "enc-depth": config.num_encoder_layers,
        "dec-depth": config.num_decoder_layers,
        "transformer-heads": config.num_heads,
        "transformer-dim-ffn": config.ffn_dim,
        "transformer-ffn-depth": 2,
        "transformer-ffn-activation": ACTIVATIONS[config.activation],
        "transformer-preprocess": "n" if config.norm_first else "",
        "transformer-postprocess": "da" if config.norm_first else "dan",
        "transformer-postprocess-top": "n" if config.norm_first else "",
        "transformer-postprocess-emb": "nd" if config.embedding_norm else "d",
        "transformer-decoder-autoreg": "self-attention",
        "transformer-no-projection": False,
        "transformer-train-position-embeddings": config.position_encoding == "learned",
        "transformer-tied-layers": [],
        "transformer-guided-alignment-layer": "last",
        "transformer-dropout": config.dropout,
        "tied-embeddings-all": tied == "all",
        "tied-embeddings-src": tied == "source",
        "tied-embeddings": tied == "target",
        "right-left": False,
    }


def _vocabulary_yaml(pieces: list[str]) -> str:
    import yaml

    return yaml.safe_dump(
        {piece: i for i, piece in enumerate(pieces)}, allow_unicode=True, sort_keys=False
    )


def export_marian(trained: TrainedModel, out: str | Path) -> Path:
    """Writes `trained` as a Marian model directory (`decoder.yml`, npz, yml, spm).

    Raises:
        MarianImportError: a setting Marian cannot express, before anything is written.
    """
    import yaml

    from translator.io import atomic_directory

    config = trained.model.config
    check_exportable(config)
    vocabulary = trained.vocabulary
    params = _params(trained.model)
    options = yaml.safe_dump(_options(config)).encode("utf-8") + b"\0"
    params[OPTIONS_KEY] = np.frombuffer(options, dtype=np.int8)
    sides = {"source": vocabulary.source, "target": vocabulary.target}
    vocabularies = {
        side: [tokenizer.id_to_piece(int(i)) for i in _marian_ids(tokenizer.vocab_size)]
        for side, tokenizer in sides.items()
    }
    one = config.share_embeddings or vocabularies["source"] == vocabularies["target"]
    with atomic_directory(out) as staging:
        np.savez(staging / MODEL_FILE, **params)
        names = [VOCAB_FILE, VOCAB_FILE] if one else ["source.vocab.yml", "target.vocab.yml"]
        for name, side in zip(names, sides, strict=True):
            (staging / name).write_text(_vocabulary_yaml(vocabularies[side]), "utf-8")
        for side, tokenizer in sides.items():
            (staging / f"{side}.spm").write_bytes(tokenizer.model_proto)
        decoder = {"models": [MODEL_FILE], "vocabs": names, "beam-size": 4, "normalize": 1.0}
        (staging / "decoder.yml").write_text(yaml.safe_dump(decoder), "utf-8")
    return Path(out)
