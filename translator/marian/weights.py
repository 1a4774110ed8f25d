"""Marian's parameters into a built `Transformer`: one small function per weight group.

Marian stores linear weights `[in, out]` (`_W*`, Keras' layout) or transposed (`_Wt*`),
biases `[1, out]`, LayerNorms as `_ln_scale`/`_ln_bias` (`_pre` when applied before the
sublayer), and the blocks as `{encoder,decoder}_l{1..n}_{self,context,ffn}`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from translator.marian.files import MarianImportError

if TYPE_CHECKING:  # pragma: no cover
    from translator.marian.vocabulary import IdSpace
    from translator.model import Transformer


class Params:
    """Marian's parameters by name; counts which were read, so none is left unread."""

    def __init__(self, params: dict[str, np.ndarray]):
        self._params = params
        self.read: set[str] = set()

    def get(self, *names: str) -> np.ndarray | None:
        for name in names:
            if name in self._params:
                self.read.add(name)
                return self._params[name]
        return None

    def need(self, *names: str) -> np.ndarray:
        value = self.get(*names)
        if value is None:
            raise MarianImportError(f"the model has no parameter {' or '.join(names)}")
        return value

    def linear(self, scope: str, suffix: str) -> tuple[np.ndarray, np.ndarray]:
        """`([in, out] kernel, [out] bias)` of `{scope}_W{suffix}` (or `_Wt`, transposed)."""
        kernel = self.get(f"{scope}_W{suffix}")
        if kernel is None:
            kernel = self.need(f"{scope}_Wt{suffix}").T
        return kernel, self.need(f"{scope}_b{suffix}").reshape(-1)

    def norm(self, scope: str) -> tuple[np.ndarray, np.ndarray]:
        """`(gamma, beta)` of a LayerNorm, whichever side of the sublayer it is on."""
        for suffix in ("_pre", ""):
            scale = self.get(f"{scope}_ln_scale{suffix}")
            if scale is not None:
                return scale.reshape(-1), self.need(f"{scope}_ln_bias{suffix}").reshape(-1)
        raise MarianImportError(f"the model has no parameter {scope}_ln_scale(_pre)")

    def unread(self) -> list[str]:
        return sorted(set(self._params) - self.read)


def _assign(variable, value: np.ndarray, name: str) -> None:
    value = np.asarray(value, np.float32)
    if tuple(variable.shape) != value.shape:
        raise MarianImportError(
            f"{name}: shape {value.shape} where the architecture needs {tuple(variable.shape)}"
        )
    variable.assign(value)


def _set_norm(norm, params: Params, scope: str) -> None:
    gamma, beta = params.norm(scope)
    _assign(norm.gamma, gamma, f"{scope}_ln_scale")
    _assign(norm.beta, beta, f"{scope}_ln_bias")


def _set_attention(attention, norm, params: Params, scope: str) -> None:
    """Q, K, V `[d, d]` -> `[d, heads, head_dim]`; O `[d, d]` -> `[heads, head_dim, d]`."""
    heads, head_dim = attention.num_heads, attention.head_dim
    for suffix, dense in (
        ("q", attention.query_dense),
        ("k", attention.key_dense),
        ("v", attention.value_dense),
    ):
        kernel, bias = params.linear(scope, suffix)
        _assign(dense.kernel, kernel.reshape(-1, heads, head_dim), f"{scope}_W{suffix}")
        _assign(dense.bias, bias.reshape(heads, head_dim), f"{scope}_b{suffix}")
    kernel, bias = params.linear(scope, "o")
    _assign(attention.output_dense.kernel, kernel.reshape(heads, head_dim, -1), f"{scope}_Wo")
    _assign(attention.output_dense.bias, bias, f"{scope}_bo")
    _set_norm(norm, params, f"{scope}_Wo")


def _set_feed_forward(feed_forward, norm, params: Params, scope: str) -> None:
    for suffix, dense in (("1", feed_forward.inner_dense), ("2", feed_forward.outer_dense)):
        kernel, bias = params.linear(scope, suffix)
        _assign(dense.kernel, kernel, f"{scope}_W{suffix}")
        _assign(dense.bias, bias, f"{scope}_b{suffix}")
    _set_norm(norm, params, f"{scope}_ffn")


def _set_positions(layer, params: Params, side: str) -> None:
    if layer is None or not hasattr(layer, "position_embeddings"):
        return  # sinusoids: nothing stored
    table = params.need(f"{side}_Wpos", "Wpos")
    _assign(layer.position_embeddings, table, f"{side}_Wpos")


def _embeddings(params: Params, side: str) -> np.ndarray:
    return params.need(f"{side}_Wemb", "Wemb")


def set_weights(
    model: Transformer, params: dict[str, np.ndarray], source: IdSpace, target: IdSpace
) -> None:
    """Writes Marian's parameters into `model` (built with the import's architecture).

    Raises:
        MarianImportError: a missing parameter, a shape that differs from the
            architecture's, or a parameter left unread (named).
    """
    p = Params(params)
    config = model.config
    _assign(model.source_embedding.embeddings, source.embedding(_embeddings(p, "encoder")), "Wemb")
    if not config.share_embeddings:
        table = target.embedding(_embeddings(p, "decoder"))
        _assign(model.target_embedding.embeddings, table, "decoder_Wemb")
    _set_positions(model.source_positions, p, "encoder")
    _set_positions(model.target_positions, p, "decoder")
    if config.embedding_norm:
        _set_norm(model.source_embedding_norm, p, "encoder_emb")
        _set_norm(model.target_embedding_norm, p, "decoder_emb")
    for i, block in enumerate(model.encoder_blocks, start=1):
        scope = f"encoder_l{i}"
        _set_attention(block.self_attention, block.self_attention_norm, p, f"{scope}_self")
        _set_feed_forward(block.feed_forward, block.feed_forward_norm, p, f"{scope}_ffn")
    for i, block in enumerate(model.decoder_blocks, start=1):
        scope = f"decoder_l{i}"
        _set_attention(block.self_attention, block.self_attention_norm, p, f"{scope}_self")
        _set_attention(block.cross_attention, block.cross_attention_norm, p, f"{scope}_context")
        _set_feed_forward(block.feed_forward, block.feed_forward_norm, p, f"{scope}_ffn")
    if config.norm_first:
        _set_norm(model.encoder_norm, p, "encoder_top")
        _set_norm(model.decoder_norm, p, "decoder_top")
    _set_output(model, p, target)
    if unread := p.unread():
        raise MarianImportError(f"parameters the architecture has no place for: {unread[:8]}")


def _set_output(model: Transformer, p: Params, target: IdSpace) -> None:
    """The output layer on our target ids: Marian's rows, its bias, the mask."""
    bias = target.output_bias(p.get("decoder_ff_logit_out_b"))
    if model.output_projection is None:
        _assign(model.output_bias, bias, "decoder_ff_logit_out_b")
        return
    kernel = p.get("decoder_ff_logit_out_W")
    if kernel is None:
        kernel = p.need("decoder_ff_logit_out_Wt").T
    # [d, marian_ids] -> [d, ids]: our columns are the embedding rows of the transpose.
    _assign(model.output_projection.kernel, target.embedding(kernel.T).T, "decoder_ff_logit_out_W")
    _assign(model.output_projection.bias, bias, "decoder_ff_logit_out_b")
