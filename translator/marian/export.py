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
    config, p = model.config, {}
    source_rows, target_rows = (
        _marian_ids(config.source_vocab_size),
        _marian_ids(config.target_vocab_size),
    )

    def array(variable) -> np.ndarray:
        return np.asarray(variable.numpy(), np.float32)

    def norm(layer, scope: str, pre: bool) -> None:
        suffix = "_pre" if pre else ""
        p[f"{scope}_ln_scale{suffix}"] = array(layer.gamma)[None, :]
        p[f"{scope}_ln_bias{suffix}"] = array(layer.beta)[None, :]

    def attention(layer, layer_norm, scope: str) -> None:
        for suffix, dense in (
            ("q", layer.query_dense),
            ("k", layer.key_dense),
            ("v", layer.value_dense),
        ):
            kernel = array(dense.kernel)
            p[f"{scope}_W{suffix}"] = kernel.reshape(kernel.shape[0], -1)
            p[f"{scope}_b{suffix}"] = array(dense.bias).reshape(1, -1)
        kernel = array(layer.output_dense.kernel)
        p[f"{scope}_Wo"] = kernel.reshape(-1, kernel.shape[-1])
        p[f"{scope}_bo"] = array(layer.output_dense.bias)[None, :]
        norm(layer_norm, f"{scope}_Wo", config.norm_first)

    def feed_forward(layer, layer_norm, scope: str) -> None:
        for suffix, dense in (("1", layer.inner_dense), ("2", layer.outer_dense)):
            p[f"{scope}_W{suffix}"] = array(dense.kernel)
            p[f"{scope}_b{suffix}"] = array(dense.bias)[None, :]
        norm(layer_norm, f"{scope}_ffn", config.norm_first)

    for i, block in enumerate(model.encoder_blocks, start=1):
        attention(block.self_attention, block.self_attention_norm, f"encoder_l{i}_self")
        feed_forward(block.feed_forward, block.feed_forward_norm, f"encoder_l{i}_ffn")
    for i, block in enumerate(model.decoder_blocks, start=1):
        attention(block.self_attention, block.self_attention_norm, f"decoder_l{i}_self")
        attention(block.cross_attention, block.cross_attention_norm, f"decoder_l{i}_context")
        feed_forward(block.feed_forward, block.feed_forward_norm, f"decoder_l{i}_ffn")
    if config.norm_first:
        norm(model.encoder_norm, "encoder_top", False)
        norm(model.decoder_norm, "decoder_top", False)
    if config.embedding_norm:
        norm(model.source_embedding_norm, "encoder_emb", True)
        norm(model.target_embedding_norm, "decoder_emb", True)
    source_table = array(model.source_embedding.embeddings)[source_rows]
    if config.share_embeddings:
        p["Wemb"] = source_table
    else:
        p["encoder_Wemb"] = source_table
        p["decoder_Wemb"] = array(model.target_embedding.embeddings)[target_rows]
    if model.output_projection is not None:
        p["decoder_ff_logit_out_W"] = array(model.output_projection.kernel)[:, target_rows]
        p["decoder_ff_logit_out_b"] = array(model.output_projection.bias)[None, target_rows]
    elif model.output_bias is not None:
        p["decoder_ff_logit_out_b"] = array(model.output_bias)[None, target_rows]
    else:
        p["decoder_ff_logit_out_b"] = np.zeros((1, len(target_rows)), np.float32)
    if config.position_encoding == "learned":  # Marian's one table, where both sides agree
        source = array(model.source_positions.position_embeddings)
        target = array(model.target_positions.position_embeddings)
        if np.array_equal(source, target):
            p["Wpos"] = source
        else:  # ours: read back by our import (CTranslate2's converter reads `Wpos` only)
            p["encoder_Wpos"], p["decoder_Wpos"] = source, target
    return p


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
