"""The one test helper every layer test calls (the keras-hub contract)."""

from __future__ import annotations

import inspect

import keras
import numpy as np


def run_layer_test(
    layer_cls,
    init_kwargs: dict,
    inputs,
    call_kwargs: dict | None = None,
    expected_output_shape: tuple | None = None,
    tmp_path=None,
):
    """Checks the layer contract and returns the layer's output.

    1. Every `__init__` argument is kept as an attribute of the same name and appears
       in `get_config()` with that value.
    2. `from_config(get_config())` gives the same config and, with the weights copied,
       the same outputs.
    3. A functional model around the layer survives a `.keras` save/load with identical
       outputs (needs `tmp_path`).

    Args:
        layer_cls: The layer class.
        init_kwargs: Constructor arguments.
        inputs: The first positional call argument (a numpy array).
        call_kwargs: Other call arguments; numpy arrays become model inputs, other values
            are passed as they are.
        expected_output_shape: Shape of the (first) output.
        tmp_path: pytest's tmp_path, for the save/load check.

    Returns:
        The layer's output on `inputs` (first element if it returns a tuple), as numpy.
    """
    call_kwargs = call_kwargs or {}
    layer = layer_cls(**init_kwargs)
    output = _first(layer(inputs, **call_kwargs))
    if expected_output_shape is not None:
        assert tuple(output.shape) == tuple(expected_output_shape)

    config = layer.get_config()
    for name in inspect.signature(layer_cls.__init__).parameters:
        if name in ("self", "kwargs"):
            continue
        assert hasattr(layer, name), f"{layer_cls.__name__} does not keep {name!r}"
        assert name in config, f"{layer_cls.__name__}.get_config() lacks {name!r}"
    for name, value in init_kwargs.items():
        if not isinstance(value, (int, float, str, bool, type(None))):
            continue
        assert getattr(layer, name) == value, name
        assert config[name] == value, name
    assert "name" in config and "trainable" in config, "get_config must chain to super"

    restored = layer_cls.from_config(config)
    assert restored.get_config() == config
    _first(restored(inputs, **call_kwargs))  # builds the weights
    restored.set_weights(layer.get_weights())
    np.testing.assert_allclose(
        _first(restored(inputs, **call_kwargs)), output, rtol=1e-6, atol=1e-6
    )

    if tmp_path is not None:
        _check_keras_file_round_trip(layer, inputs, call_kwargs, tmp_path)
    return np.asarray(output)


def _first(result):
    return np.asarray(result[0] if isinstance(result, (tuple, list)) else result)


def _check_keras_file_round_trip(layer, inputs, call_kwargs, tmp_path):
    def symbolic(array, name):
        return keras.Input(
            shape=array.shape[1:], batch_size=array.shape[0], dtype=str(array.dtype), name=name
        )

    tensor_names = [k for k, v in call_kwargs.items() if isinstance(v, np.ndarray)]
    model_inputs = {"inputs": symbolic(inputs, "inputs")}
    model_inputs.update({k: symbolic(call_kwargs[k], k) for k in tensor_names})
    other = {k: v for k, v in call_kwargs.items() if k not in tensor_names}
    outputs = layer(model_inputs["inputs"], **{k: model_inputs[k] for k in tensor_names}, **other)
    model = keras.Model(model_inputs, outputs)
    feed = {"inputs": inputs, **{k: call_kwargs[k] for k in tensor_names}}
    expected = model(feed)

    path = tmp_path / f"{layer.name}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    actual = loaded(feed)
    for a, e in zip(keras.tree.flatten(actual), keras.tree.flatten(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-6, atol=1e-6)
    restored_layer = loaded.get_layer(layer.name)
    assert type(restored_layer) is type(layer)
    assert restored_layer.get_config() == layer.get_config()
