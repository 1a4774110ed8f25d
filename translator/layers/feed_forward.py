"""The position-wise feed-forward network (paper, section 3.3)."""

from __future__ import annotations

import keras
from keras import ops

from translator.config import ACTIVATIONS
from translator.layers.dropout import FastDropout
from translator.layers.initializers import clone_initializer

# Marian's "gelu": x sigmoid(1.702 x), the sigmoid approximation (Hendrycks & Gimpel 2016).
GELU_SIGMOID_SLOPE = 1.702


@keras.saving.register_keras_serializable(package="translator")
class FeedForward(keras.layers.Layer):
    """FFN(x) = W2 act(W1 x + b1) + b2, applied at every position alike.

    Args:
        hidden_dim: Inner width (d_ff).
        activation: "relu" (the paper), "gelu" (tanh approximation), "swiglu": W2
            (silu(Wg x) * W1 x), the gated unit of Shazeer (2020), which adds the gate
            projection Wg; "swish" (silu) or "gelu_sigmoid" (x sigmoid(1.702 x)).
        dropout: Dropout rate after the activation.
        use_bias: Biases on the projections.
        kernel_initializer: Initializer of the kernels.
        **kwargs: Standard `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[batch, length, d_model]`.
        training: Applies dropout when True.

    Returns:
        `[batch, length, d_model]`.
    """

    def __init__(
        self,
        hidden_dim: int,
        activation: str = "relu",
        dropout: float = 0.0,
        use_bias: bool = True,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.hidden_dim = hidden_dim
        self.activation = activation
        self.dropout = dropout
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, inputs_shape):
        def dense(units, name, input_dim):
            layer = keras.layers.Dense(
                units,
                use_bias=self.use_bias,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                dtype=self.dtype_policy,
                name=name,
            )
            layer.build((None, None, input_dim))
            return layer

        d_model = inputs_shape[-1]
        self.inner_dense = dense(self.hidden_dim, "inner", d_model)
        self.gate_dense = (
            dense(self.hidden_dim, "gate", d_model) if self.activation == "swiglu" else None
        )
        self.outer_dense = dense(d_model, "outer", self.hidden_dim)
        self.activation_dropout = FastDropout(
            self.dropout, dtype=self.dtype_policy, name="activation_dropout"
        )
        # The activation is chosen once here, so `call` does not branch on a string.
        self._activate = {
            "relu": lambda x: ops.relu(self.inner_dense(x)),
            "gelu": lambda x: ops.gelu(self.inner_dense(x)),
            "swiglu": lambda x: ops.silu(self.gate_dense(x)) * self.inner_dense(x),
            "swish": lambda x: ops.silu(self.inner_dense(x)),
            "gelu_sigmoid": lambda x: _gelu_sigmoid(self.inner_dense(x)),
        }[self.activation]
        self.built = True

    def call(self, inputs, training=None):
        hidden = self._activate(inputs)  # [batch, length, hidden_dim]
        hidden = self.activation_dropout(hidden, training=training)
        return self.outer_dense(hidden)  # [batch, length, d_model]

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "activation": self.activation,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


def _gelu_sigmoid(x):
    return x * ops.sigmoid(ops.cast(GELU_SIGMOID_SLOPE, x.dtype) * x)
