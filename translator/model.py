"""The encoder-decoder Transformer (Vaswani et al. 2017) as a Keras model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import keras
from keras import ops

from translator.backends import kernels
from translator.config import PRECISIONS, TransformerConfig
from translator.constants import BOS_ID, PAD_ID
from translator.errors import ConfigError
from translator.layers import (
    DecoderBlock,
    EncoderBlock,
    LayerNorm,
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
    TokenEmbedding,
)
from translator.layers.attention import GrowingCache
from translator.layers.dropout import FastDropout
from translator.layers.masks import cache_mask, causal_mask, padding_mask

if TYPE_CHECKING:  # pragma: no cover
    from translator.backends.packing import PackedLayout
    from translator.tensors import Tensor


class DecodingCache(NamedTuple):
    """Everything `decode_step` needs besides the next token and its position.

    A nest of tensors, so a loop can carry it and a search reorder its rows (axis 0).
    """

    # Per decoder layer, (keys, values) of the target prefix, each [batch, heads,
    # max_length, head_dim] (zeros after the prefix), or a `GrowingCache`.
    self_attention: tuple[tuple[Tensor, Tensor] | GrowingCache, ...]
    # Per decoder layer, (keys, values) of the encoder output, computed once, each
    # [sources, heads, source_length, head_dim]; `batch` may be `sources * group`.
    cross_attention: tuple[tuple[Tensor, Tensor], ...]
    # True on real source tokens: [sources, source_length] bool.
    source_mask: Tensor

    def for_beams(self, beam: int) -> DecodingCache:
        """The cache with `beam` self-attention rows per sentence (row `s * beam + k`)."""
        # One row index for all tensors: a repeat per tensor traces its own shape plumbing.
        rows = ops.repeat(ops.arange(ops.shape(self.source_mask)[0]), beam)  # [sentences * beam]
        repeated = keras.tree.map_structure(
            lambda x: ops.take(x, rows, axis=0), self.self_attention
        )  # [sentences * beam, heads, length, head_dim] each
        return self._replace(self_attention=repeated)


@keras.saving.register_keras_serializable(package="translator")
class Transformer(keras.Model):
    """Encoder-decoder Transformer for translation.

    `model((source_ids, target_input_ids))` (or a dict with keys `source_ids` and
    `decoder_input_ids`) returns next-token logits `[batch, target_length, vocab]` in
    float32. Id 0 is padding in source and target.

    Args:
        config: A `TransformerConfig`, or its dict form (as stored in `.keras` files).
        **kwargs: Standard `keras.Model` arguments (name, dtype policy).
    """

    def __init__(self, config: TransformerConfig | dict[str, Any], **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        self.config = config
        d_model, policy = config.d_model, self.dtype_policy

        self.source_embedding = TokenEmbedding(
            config.source_vocab_size, d_model, dtype=policy, name="source_embedding"
        )
        # Shared embeddings: no second attribute, which Keras would track twice.
        self._own_target_embedding = (
            None
            if config.share_embeddings
            else TokenEmbedding(
                config.target_vocab_size, d_model, dtype=policy, name="target_embedding"
            )
        )
        self.source_positions = self._position_layer("source_positions")
        self.target_positions = self._position_layer("target_positions")
        self.source_embedding_norm = self._embedding_norm("source_embedding_norm")
        self.target_embedding_norm = self._embedding_norm("target_embedding_norm")
        self.embedding_dropout = FastDropout(config.dropout, dtype=policy, name="embedding_dropout")
        block_args = dict(
            num_heads=config.num_heads,
            ffn_dim=config.ffn_dim,
            activation=config.activation,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            activation_dropout=config.activation_dropout,
            norm_first=config.norm_first,
            layer_norm_epsilon=config.layer_norm_epsilon,
            rotary_embedding=config.position_encoding == "rotary",
            dtype=policy,
        )
        self.encoder_blocks = [
            EncoderBlock(**block_args, name=f"encoder_block_{i}")
            for i in range(config.num_encoder_layers)
        ]
        self.decoder_blocks = [
            DecoderBlock(**block_args, name=f"decoder_block_{i}")
            for i in range(config.num_decoder_layers)
        ]
        self.output_bias = None  # a tied projection's bias, made in `build`
        # Pre-norm leaves the residual stream unnormalized: normalize once at the end.
        self.encoder_norm = self._final_norm("encoder_norm")
        self.decoder_norm = self._final_norm("decoder_norm")
        self.output_projection = (
            None
            if config.tie_output_projection
            else keras.layers.Dense(
                config.target_vocab_size, dtype=policy, name="output_projection"
            )
        )

    def _position_layer(self, name: str):
        """The additive position layer of the config, or None for rotary (in attention)."""
        encoding = self.config.position_encoding
        if encoding == "sinusoidal":
            return SinusoidalPositionEncoding(
                layout=self.config.sinusoid_layout, dtype=self.dtype_policy, name=name
            )
        if encoding == "learned":
            return LearnedPositionEmbedding(
                self.config.max_length, dtype=self.dtype_policy, name=name
            )
        return None

    def _embedding_norm(self, name: str):
        if not self.config.embedding_norm:
            return None
        return LayerNorm(epsilon=self.config.layer_norm_epsilon, dtype=self.dtype_policy, name=name)

    def _final_norm(self, name: str):
        if not self.config.norm_first:
            return None
        return LayerNorm(epsilon=self.config.layer_norm_epsilon, dtype=self.dtype_policy, name=name)

    @property
    def target_embedding(self) -> TokenEmbedding:
        """The target token embedding (the source one under `share_embeddings`)."""
        return self._own_target_embedding or self.source_embedding

    def build(self, inputs_shape=None):
        """Creates every weight; all shapes follow from the config, not the inputs."""
        d_model = self.config.d_model
        ids_shape, hidden_shape = (None, None), (None, None, d_model)
        self.source_embedding.build(ids_shape)
        if self._own_target_embedding is not None:
            self._own_target_embedding.build(ids_shape)
        for positions in (self.source_positions, self.target_positions):
            if positions is not None:
                positions.build(hidden_shape)
        for block in self.encoder_blocks:
            block.build(hidden_shape)
        for block in self.decoder_blocks:
            block.build(hidden_shape, hidden_shape)
        for norm in (
            self.encoder_norm,
            self.decoder_norm,
            self.source_embedding_norm,
            self.target_embedding_norm,
        ):
            if norm is not None:
                norm.build(hidden_shape)
        if self.output_projection is not None:
            self.output_projection.build(hidden_shape)
        # A tied projection's bias (an untied one holds its own): float32, as the logits.
        self.output_bias = (
            self.add_weight(
                name="output_bias",
                shape=(self.config.target_vocab_size,),
                initializer="zeros",
                dtype="float32",
            )
            if self.config.output_bias and self.output_projection is None
            else None
        )
        self.built = True

    # ---- The full, teacher-forced pass --------------------------------------------------

    def call(self, inputs, training=None):
        """Logits for every target position.

        Args:
            inputs: `(source_ids, target_input_ids)` or a dict with keys `source_ids` and
                `decoder_input_ids`; int `[batch, source_length]` and
                `[batch, target_length]`, padded with 0.
            training: Applies dropout when True.

        Returns:
            float32 `[batch, target_length, target_vocab_size]`.
        """
        if isinstance(inputs, dict):
            source_ids, target_ids = inputs["source_ids"], inputs["decoder_input_ids"]
        else:
            source_ids, target_ids = inputs
        encoder_output = self.encode(source_ids, training=training)
        return self.decode(target_ids, encoder_output, source_ids, training=training)

    def encode(self, source_ids, training=None, layout=None):
        """Runs the encoder.

        Args:
            source_ids: int `[batch, source_length]`, 0 = padding.
            training: Applies dropout when True.
            layout: `self.packed_layout(source_ids)` to run on the real tokens only,
                as packed rows (see `packed_layout`); None for the padded grid.

        Returns:
            `[batch, source_length, d_model]` (values at padding positions are unused),
            or `[tokens, d_model]` with a `layout`.
        """
        mask = padding_mask(source_ids)  # [batch, 1, source_length]
        x = self._embed(self._source_side, source_ids, 0, training, layout)
        for block in self.encoder_blocks:
            x = block(x, attention_mask=mask, training=training, layout=layout)
        return x if self.encoder_norm is None else self.encoder_norm(x, training=training)

    def decode(self, target_ids, encoder_output, source_ids, training=None):
        """Runs the decoder over a whole target prefix (teacher forcing).

        Args:
            target_ids: int `[batch, target_length]`, starting with BOS, 0 = padding.
            encoder_output: `[batch, source_length, d_model]` from `encode`.
            source_ids: int `[batch, source_length]`, for the cross-attention mask.
            training: Applies dropout when True.

        Returns:
            float32 logits `[batch, target_length, target_vocab_size]`.
        """
        states = self.decoder_states(target_ids, encoder_output, source_ids, training)
        return self.logits(states, training)

    def decoder_states(
        self,
        target_ids,
        encoder_output,
        source_ids,
        training=None,
        layout=None,
        encoder_layout=None,
        attention_of: int | None = None,
    ):
        """The last decoder block's output for every target position (before `logits`).

        Args: as `decode`, and
            layout: `self.packed_layout(target_ids)` to run on the real target tokens
                only, as packed rows; None for the padded grid.
            encoder_layout: The source's layout, with `encoder_output` packed rows.
            attention_of: Stop at this block (from 0) and return its cross-attention
                weights `[batch, heads, target_length, source_length]` instead.

        Returns:
            `[batch, target_length, d_model]` in the compute dtype, or `[tokens,
            d_model]` with a `layout`.
        """
        length = ops.shape(target_ids)[1]
        self_mask = ops.logical_and(causal_mask(length), padding_mask(target_ids))  # [b, t, t]
        cross_mask = padding_mask(source_ids)  # [batch, 1, source_length]
        x = self._embed(self._target_side, target_ids, 0, training, layout)
        for index, block in enumerate(self.decoder_blocks):
            x = block(
                x,
                encoder_output=encoder_output,
                self_attention_mask=self_mask,
                cross_attention_mask=cross_mask,
                training=training,
                layout=layout,
                encoder_layout=encoder_layout,
                return_cross_attention=index == attention_of,
            )
            if index == attention_of:
                return x[1]
        return x

    def cross_attention(self, source_ids, target_ids, layer: int):
        """One decoder layer's cross-attention, heads averaged, over a teacher-forced pass.

        What word alignments are read from (`translator.alignment`).

        Args:
            source_ids: int `[batch, source_length]`, 0 = padding.
            target_ids: int `[batch, target_length]`, starting with BOS, 0 = padding.
            layer: The decoder block, from 0 (negative: from the top, -1 the last).

        Returns:
            float32 `[batch, target_length, source_length]`: row t is where the query at
            target position t (the step that predicts token t + 1) looks, summing to 1
            over the source's tokens.
        """
        index = range(len(self.decoder_blocks))[layer]  # IndexError names an absent layer
        encoder_output = self.encode(source_ids)
        weights = self.decoder_states(target_ids, encoder_output, source_ids, attention_of=index)
        return ops.mean(ops.cast(weights, "float32"), axis=1)

    def packed_layout(self, ids) -> PackedLayout | None:
        """Where the real tokens of `ids` sit, for a full pass on them alone.

        Position-wise ops then skip the padding (decision D1); None under RoPE or without
        dynamic shapes.

        Args:
            ids: int `[batch, length]`, 0 = padding.
        """
        return None if self.config.position_encoding == "rotary" else kernels.packed_layout(ids)

    @property
    def _source_side(self):
        return self.source_embedding, self.source_positions, self.source_embedding_norm, False

    @property
    def _target_side(self):
        zero_start = self.config.zero_start_embedding
        return self.target_embedding, self.target_positions, self.target_embedding_norm, zero_start

    def _embed(self, side, ids, start_index, training, layout=None):
        """Tokens -> embeddings + positions (-> LayerNorm) -> dropout, for one side."""
        embedding, positions, norm, zero_start = side
        x = embedding(ids)  # [batch, length, d_model]
        if zero_start:  # Marian's decoder starts from a zero vector, not BOS's row
            x = x * ops.cast(ops.not_equal(ids, BOS_ID), x.dtype)[..., None]
        if positions is not None:
            x = positions(x, start_index=start_index)
        if norm is not None:
            x = norm(x, training=training)
        if layout is not None:  # packed before the dropout, which then skips the padding
            x = layout.pack(x)  # [tokens, d_model]
        return self.embedding_dropout(x, training=training)

    def logits(self, hidden, training=None):
        """Vocabulary logits of decoder states.

        Args:
            hidden: `[..., d_model]` from `decoder_states`.
            training: True when training (the final norm then runs Keras' ops).

        Returns:
            float32 `[..., target_vocab_size]`.
        """
        if self.decoder_norm is not None:
            hidden = self.decoder_norm(hidden, training=training)
        if self.output_projection is not None:
            return ops.cast(self.output_projection(hidden), "float32")
        logits = self.target_embedding.project(hidden)  # [batch, length, vocab]
        return logits if self.output_bias is None else logits + self.output_bias

    # ---- Incremental decoding, for search ------------------------------------------------

    def init_cache(self, encoder_output, source_ids, max_length) -> DecodingCache:
        """An empty self-attention cache and the cross-attention keys/values, once.

        Args:
            encoder_output: `[batch, source_length, d_model]` from `encode`.
            source_ids: int `[batch, source_length]`, 0 = padding.
            max_length: Static number of target positions the cache holds, or None for
                a cache of the written positions only (`translator.layers.GrowingCache`:
                faster, but its shape changes every step, which XLA cannot compile).

        Returns:
            A `DecodingCache` for `batch` sentences.
        """
        batch = ops.shape(encoder_output)[0]
        return DecodingCache(
            self_attention=tuple(
                block.self_attention.empty_cache(batch, max_length) for block in self.decoder_blocks
            ),
            cross_attention=tuple(
                block.cross_attention.compute_key_value(encoder_output)
                for block in self.decoder_blocks
            ),
            source_mask=ops.not_equal(source_ids, PAD_ID),
        )

    def decode_step(self, token_ids, cache: DecodingCache, index):
        """Logits for the next token after feeding `token_ids` at position `index`.

        Args:
            token_ids: int `[batch]`, the tokens at position `index` (BOS at 0).
            cache: The `DecodingCache` holding positions `0 .. index - 1`.
            index: int scalar, the position of `token_ids`.

        Returns:
            `(logits, cache)`: float32 `[batch, target_vocab_size]` and the cache with
            position `index` written.
        """
        if isinstance(cache.self_attention[0], GrowingCache):
            self_mask = None  # it holds positions 0 .. index only, all visible
        else:
            max_length = ops.shape(cache.self_attention[0][0])[2]  # keys [b, heads, T, hd]
            self_mask = cache_mask(index, max_length)  # [1, 1, max_length]
        cross_mask = ops.expand_dims(cache.source_mask, axis=1)  # [sources, 1, source_length]
        x = self._embed(self._target_side, token_ids[:, None], index, False)  # [batch, 1, d]
        new_self_attention = []
        for block, self_kv, cross_kv in zip(
            self.decoder_blocks, cache.self_attention, cache.cross_attention, strict=True
        ):
            x, self_kv = block(
                x,
                self_attention_mask=self_mask,
                cross_attention_mask=cross_mask,
                self_attention_cache=self_kv,
                cross_attention_cache=cross_kv,
                cache_index=index,
                training=False,
            )
            new_self_attention.append(self_kv)
        # `hidden @ table^T`, as in training: `(table @ hidden^T)^T` is slower in bfloat16.
        logits = self.logits(x[:, 0, :])  # [batch, vocab]
        return logits, cache._replace(self_attention=tuple(new_self_attention))

    # ---- Copies for inference ------------------------------------------------------------

    def with_policy(self, policy: str) -> Transformer:
        """A copy with the same config and weights under another dtype policy.

        Args:
            policy: A Keras dtype policy name ("float32", "bfloat16", "mixed_bfloat16", ...).
        """
        copy = Transformer(self.config, dtype=policy, name=self.name)
        copy.build()
        copy.set_weights(self.get_weights())  # cast to the copy's variable dtype
        return copy

    def for_inference(self, precision: str = "model") -> Transformer:
        """The model with its variables in the dtype it decodes in: itself, or a copy.

        Args:
            precision: "model": the compute dtype of the model's policy (bfloat16 for a
                mixed_bfloat16 model); "float32": float32 throughout.

        Mixed precision casts every float32 variable at each use, which a decoding step
        pays every step; a copy with compute-dtype variables avoids that (decision D2).
        Only the layer norms' scales and offsets round differently.

        Raises:
            ConfigError: an unknown `precision`.
        """
        if precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        policy = self.dtype_policy
        dtype = policy.compute_dtype if precision == "model" else precision
        if policy.variable_dtype == policy.compute_dtype == dtype:
            return self
        return self.with_policy(dtype)

    # ---- Introspection and serialization -------------------------------------------------

    def parameter_breakdown(self) -> dict[str, int]:
        """Parameter counts of the embeddings, encoder, decoder and output projection."""

        def count(layers):
            return sum(int(w.numpy().size) for layer in layers if layer for w in layer.weights)

        return {
            "embeddings": count(
                [
                    self.source_embedding,
                    self._own_target_embedding,
                    self.source_positions,
                    self.target_positions,
                    self.source_embedding_norm,
                    self.target_embedding_norm,
                ]
            ),
            "encoder": count([*self.encoder_blocks, self.encoder_norm]),
            "decoder": count([*self.decoder_blocks, self.decoder_norm]),
            "output_projection": count([self.output_projection])
            + (0 if self.output_bias is None else self.config.target_vocab_size),
        }

    def get_config(self):
        config = super().get_config()
        config.update({"config": self.config.to_dict()})
        return config
