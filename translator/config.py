"""`TransformerConfig`: the frozen, typed description of a Transformer's shape.

One config per concern: this one says what the network *is* (sizes, options),
nothing about data, optimization or decoding, which have their own configs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from translator.config_base import DictConfig
from translator.errors import ConfigError

PositionEncoding = Literal["sinusoidal", "learned", "rotary"]
Activation = Literal["relu", "gelu", "swiglu", "swish", "gelu_sigmoid"]
SinusoidLayout = Literal["interleaved", "marian"]
POSITION_ENCODINGS: tuple[str, ...] = ("sinusoidal", "learned", "rotary")
ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "swiglu", "swish", "gelu_sigmoid")
SINUSOID_LAYOUTS: tuple[str, ...] = ("interleaved", "marian")
# What a trained model decodes in (`Transformer.for_inference`, `--precision`): "model",
# the compute dtype of its training policy, or "float32".
PRECISIONS: tuple[str, ...] = ("model", "float32")


# The dropout rates of a `TransformerConfig`.
DROPOUT_FIELDS = ("dropout", "attention_dropout", "activation_dropout")


def dropout_problem(value: object) -> str | None:
    """What is wrong with a dropout rate ("must be in [0, 1), got 1.5"), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"expected a number, got {value!r}"
    if not 0.0 <= value < 1.0:
        return f"must be in [0, 1), got {value}"
    return None


@dataclasses.dataclass(frozen=True)
class TransformerConfig(DictConfig):
    """The architecture of an encoder-decoder Transformer.

    Build one from a named preset (`TransformerConfig.preset("base", vocab_size=37000)`)
    and change fields with `dataclasses.replace` or keyword overrides to `preset`.
    """

    # Size of the source vocabulary, padding id 0 included.
    source_vocab_size: int
    # Size of the target vocabulary, padding id 0 included.
    target_vocab_size: int
    # Encoder blocks stacked (the paper's N).
    num_encoder_layers: int = 6
    # Decoder blocks stacked.
    num_decoder_layers: int = 6
    # Width of every residual stream, embedding and attention output (d_model).
    d_model: int = 512
    # Attention heads; d_model must divide evenly into them (head size d_model / heads).
    num_heads: int = 8
    # Inner width of the position-wise feed-forward network (d_ff).
    ffn_dim: int = 2048
    # Feed-forward activation: "relu" (the paper), "gelu" (tanh approximation), "swiglu"
    # (gated, Shazeer 2020), "swish" (x sigmoid(x)) or "gelu_sigmoid" (x sigmoid(1.702 x),
    # what Marian calls gelu); the last two are for imported Marian models.
    activation: Activation = "relu"
    # Dropout on every sublayer output and on embeddings + positions (P_drop).
    dropout: float = 0.1
    # Dropout on the attention weights.
    attention_dropout: float = 0.0
    # Dropout inside the feed-forward network, after the activation.
    activation_dropout: float = 0.0
    # "sinusoidal" (the paper), "learned" absolute positions, or "rotary" (RoPE, in attention).
    position_encoding: PositionEncoding = "sinusoidal"
    # The sinusoid table: "interleaved" (the paper's: sin and cos of one frequency in each
    # channel pair) or "marian" (Marian's own: all sines, then all cosines, at frequencies
    # 10000^(-i/(d/2 - 1)) rather than the paper's 10000^(-2i/d)).
    sinusoid_layout: SinusoidLayout = "interleaved"
    # LayerNorm on embeddings + positions before the first block, per side (Marian's
    # `--transformer-postprocess-emb n`).
    embedding_norm: bool = False
    # Longest sequence the learned position table covers (sinusoidal and rotary are unbounded).
    max_length: int = 1024
    # True: LayerNorm before each sublayer (stable without warmup tricks); False: after the
    # residual add, as in the original paper.
    norm_first: bool = True
    # Epsilon of every LayerNormalization.
    layer_norm_epsilon: float = 1e-6
    # One embedding table for source and target; needs equal vocabulary sizes (joint vocab).
    share_embeddings: bool = True
    # Output projection = transposed target embedding (the paper's weight tying).
    tie_output_projection: bool = True
    # A bias on the tied output projection (Marian's); an untied projection always has one.
    output_bias: bool = False
    # The decoder's first input is a zero vector (Marian's start) instead of BOS's row.
    zero_start_embedding: bool = False

    @property
    def position_limit(self) -> int | None:
        """The most positions the model embeds: the learned table's size; None if unbounded.

        Bounds the sources (`translator.text.default_max_source_length`) and the outputs
        (`translator.search.common.output_length_limits`) alike.
        """
        return self.max_length if self.position_encoding == "learned" else None

    def __post_init__(self) -> None:
        problems = []
        for name in ("source_vocab_size", "target_vocab_size", "d_model", "num_heads"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("num_encoder_layers", "num_decoder_layers", "ffn_dim", "max_length"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_heads >= 1 and self.d_model % self.num_heads:
            problems.append(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.position_encoding == "rotary" and (self.d_model // max(self.num_heads, 1)) % 2:
            problems.append("position_encoding 'rotary' needs an even head size")
        if self.position_encoding not in POSITION_ENCODINGS:
            problems.append(
                f"position_encoding must be one of {POSITION_ENCODINGS}, "
                f"got {self.position_encoding!r}"
            )
        if self.sinusoid_layout not in SINUSOID_LAYOUTS:
            problems.append(
                f"sinusoid_layout must be one of {SINUSOID_LAYOUTS}, got {self.sinusoid_layout!r}"
            )
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        for name in DROPOUT_FIELDS:
            if problem := dropout_problem(getattr(self, name)):
                problems.append(f"{name} {problem}")
        if self.share_embeddings and self.source_vocab_size != self.target_vocab_size:
            problems.append(
                "share_embeddings needs source_vocab_size == target_vocab_size, got "
                f"{self.source_vocab_size} and {self.target_vocab_size}"
            )
        if problems:
            raise ConfigError("Invalid TransformerConfig: " + "; ".join(problems))

    @property
    def head_dim(self) -> int:
        """Size of one attention head."""
        return self.d_model // self.num_heads

    @classmethod
    def preset(
        cls, name: str, *, vocab_size: int | None = None, **overrides: Any
    ) -> TransformerConfig:
        """Returns a named preset.

        Args:
            name: One of `TransformerConfig.presets()`: "base" and "big" are the paper's
                models; "small" and "tiny" are sized for CPU work.
            vocab_size: Shared source and target vocabulary size. Alternatively pass
                `source_vocab_size` and `target_vocab_size` (with `share_embeddings=False`
                when they differ).
            **overrides: Any other field of the config.

        Raises:
            ConfigError: for an unknown preset name or field, or an invalid combination.
        """
        if name not in PRESETS:
            raise ConfigError(f"Unknown preset {name!r}; choose from {sorted(PRESETS)}")
        fields = dict(PRESETS[name])
        if vocab_size is not None:
            fields["source_vocab_size"] = vocab_size
            fields["target_vocab_size"] = vocab_size
        fields.update(overrides)
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"Unknown TransformerConfig field(s): {', '.join(unknown)}")
        if "source_vocab_size" not in fields or "target_vocab_size" not in fields:
            raise ConfigError(
                "preset() needs vocab_size (or source_vocab_size and target_vocab_size)"
            )
        return cls(**fields)

    @staticmethod
    def presets() -> tuple[str, ...]:
        """Names accepted by `preset`."""
        return tuple(PRESETS)


# Named presets. Vocabulary sizes are left out: they come from the data.
PRESETS: dict[str, dict[str, Any]] = {
    # Vaswani et al. 2017, Table 3 "base": 65M parameters with a 37k shared vocabulary.
    "base": dict(
        num_encoder_layers=6,
        num_decoder_layers=6,
        d_model=512,
        num_heads=8,
        ffn_dim=2048,
        dropout=0.1,
    ),
    # Table 3 "big": 213M parameters; dropout 0.3 as for EN-DE.
    "big": dict(
        num_encoder_layers=6,
        num_decoder_layers=6,
        d_model=1024,
        num_heads=16,
        ffn_dim=4096,
        dropout=0.3,
    ),
    # A 2-core CPU model for small corpora such as Multi30k (the OpenNMT-tf comparison shape).
    "small": dict(
        num_encoder_layers=3,
        num_decoder_layers=3,
        d_model=256,
        num_heads=4,
        ffn_dim=1024,
        dropout=0.1,
    ),
    # For tests and smoke runs: trains in seconds.
    "tiny": dict(
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_model=64,
        num_heads=4,
        ffn_dim=128,
        dropout=0.1,
        max_length=256,
    ),
}

# The fields of a `TransformerConfig` by what sets them: the vocabulary its sizes, the
# dropout rates a run (or a fine-tuning run) chooses, and the architecture, every other
# field, which a trained model fixes. The shape is the architecture's size, what the
# planner chooses among its candidates.
VOCABULARY_FIELDS = ("source_vocab_size", "target_vocab_size")
ARCHITECTURE_FIELDS = tuple(
    field.name
    for field in dataclasses.fields(TransformerConfig)
    if field.name not in DROPOUT_FIELDS + VOCABULARY_FIELDS
)
SHAPE_FIELDS = ("num_encoder_layers", "num_decoder_layers", "d_model", "num_heads", "ffn_dim")
assert set(SHAPE_FIELDS) <= set(ARCHITECTURE_FIELDS)
