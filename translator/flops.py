"""Model FLOPs of the Transformer, for throughput and MFU figures.

Counts the matrix products' multiply-adds (2 FLOPs each), as is customary for MFU;
padding is not counted.
"""

from __future__ import annotations

import numpy as np

from translator.config import TransformerConfig


def forward_flops(config: TransformerConfig, source_length, target_length):
    """FLOPs of one teacher-forced forward pass over sentence pairs.

    Args:
        config: The model's config.
        source_length: Real source tokens per pair (scalar or array).
        target_length: Real target tokens per pair (scalar or array).

    Returns:
        FLOPs per pair (same shape as the lengths), as float64.
    """
    s = np.asarray(source_length, np.float64)
    t = np.asarray(target_length, np.float64)
    d, f = config.d_model, config.ffn_dim
    ffn = (3 if config.activation == "swiglu" else 2) * 2 * d * f  # per token
    projections = 4 * 2 * d * d  # q, k, v, output, per token
    encoder = config.num_encoder_layers * s * (projections + ffn + 2 * 2 * s * d)
    decoder = config.num_decoder_layers * (
        t * (projections + 2 * 2 * t * d)  # masked self-attention (whole t x t product)
        + t * 2 * 2 * d * d  # cross-attention query and output projections
        + s * 2 * 2 * d * d  # cross-attention keys and values of the source
        + t * 2 * 2 * s * d  # cross-attention scores and weighted sum
        + t * ffn
    )
    output = t * 2 * d * config.target_vocab_size
    return encoder + decoder + output


def training_flops(config: TransformerConfig, source_length, target_length):
    """FLOPs of a training step per pair: forward + backward (twice the forward)."""
    return 3.0 * forward_flops(config, source_length, target_length)
