"""Keras layers of the Transformer, one public layer per module."""

from translator.layers.attention import GrowingCache, MultiHeadAttention
from translator.layers.decoder_block import DecoderBlock
from translator.layers.dropout import FastDropout
from translator.layers.encoder_block import EncoderBlock
from translator.layers.feed_forward import FeedForward
from translator.layers.layer_norm import LayerNorm
from translator.layers.learned_position_embedding import LearnedPositionEmbedding
from translator.layers.rotary_embedding import RotaryEmbedding
from translator.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from translator.layers.token_embedding import TokenEmbedding

__all__ = [
    "DecoderBlock",
    "EncoderBlock",
    "FastDropout",
    "FeedForward",
    "GrowingCache",
    "LayerNorm",
    "LearnedPositionEmbedding",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "SinusoidalPositionEncoding",
    "TokenEmbedding",
]
