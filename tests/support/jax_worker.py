"""Runs the model, the search and a training step on Keras' JAX backend, TensorFlow blocked.

`python -m tests.support.jax_worker DIR` reads DIR/spec.json (the model's config, the
search configs), DIR/model.weights.h5 (written under TensorFlow) and DIR/inputs.npz,
and writes DIR/jax.npz. Importing `tensorflow` raises here, so a module that still
needs it fails this run, as it would on an accelerator machine without TensorFlow.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.no_tensorflow import block_tensorflow

block_tensorflow()

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tests.support.runs import planned_shape  # noqa: E402
from training.config import RunConfig  # noqa: E402
from training.engines.jax_step import JaxTrainer  # noqa: E402
from training.optimizer import make_optimizer, make_schedule  # noqa: E402
from translator import flops  # noqa: E402
from translator.config import TransformerConfig  # noqa: E402
from translator.layers import EncoderBlock  # noqa: E402
from translator.model import Transformer  # noqa: E402
from translator.search import JaxDecoder, SearchConfig  # noqa: E402


def _model(spec: dict, weights: Path, policy: str = "float32") -> Transformer:
    model = Transformer(TransformerConfig.from_dict(spec["model"]), dtype=policy)
    model.build()
    model.load_weights(weights)
    return model


def _trainer(model: Transformer, total_updates: int, clip_norm: float) -> JaxTrainer:
    run = RunConfig()
    schedule = make_schedule(run, model.config.d_model)
    schedule.total_updates.assign(float(total_updates))
    optimizer = make_optimizer(run, model.config.d_model, schedule)
    return JaxTrainer(model, optimizer, schedule, label_smoothing=0.1, clip_norm=clip_norm)


def main(directory: Path) -> None:
    spec = json.loads((directory / "spec.json").read_text())
    inputs = dict(np.load(directory / "inputs.npz"))
    weights = directory / "model.weights.h5"
    model = _model(spec, weights)
    source, target, labels = inputs["source"], inputs["target"], inputs["labels"]
    out: dict[str, np.ndarray] = {"backend": np.array(keras.backend.backend())}

    out["logits"] = np.asarray(model((source, target), training=False))
    # No future leakage: other tokens after position 3 leave positions 0..3 alone.
    changed = target.copy()
    changed[:, 4:] = (changed[:, 4:] + 7) % (model.config.target_vocab_size - 4) + 4
    out["logits_changed_future"] = np.asarray(model((source, changed), training=False))
    # Source padding changes nothing: three more padding columns.
    padded = np.pad(source, [(0, 0), (0, 3)])
    out["logits_padded_source"] = np.asarray(model((padded, target), training=False))

    # The attention word alignments read, over the labels as translations.
    out["attention"] = JaxDecoder(model, SearchConfig()).cross_attention(source, labels)
    for name, fields in spec["searches"].items():
        result = JaxDecoder(model, SearchConfig(**fields))(source)
        out[f"{name}_ids"], out[f"{name}_scores"] = result.ids, result.scores

    # One step's loss and gradients from the TensorFlow weights (clipping off: raw).
    features = {"source_ids": source, "decoder_input_ids": target}
    trainer = _trainer(model, total_updates=100, clip_norm=0.0)
    loss, gradients = trainer.loss_and_gradients(trainer.state(), (features, labels))
    out["loss"] = np.asarray(loss)
    for variable, gradient in zip(model.trainable_variables, gradients, strict=True):
        out[f"grad/{variable.path.partition('/')[2]}"] = np.asarray(gradient)  # no model name

    # N steps in mixed bfloat16 with clipping lower the loss on this batch.
    mixed = _model(spec, weights, policy="mixed_bfloat16")
    trainer = _trainer(mixed, total_updates=spec["steps"], clip_norm=1.0)
    state, losses = trainer.state(), []
    for _ in range(spec["steps"]):
        state, result = trainer.step(state, (features, labels))
        losses.append(float(result.loss_sum / result.tokens))
    trainer.write_back(state)
    out["step_losses"] = np.array(losses)
    out["iterations"] = np.asarray(trainer.optimizer.iterations.value)

    # The planner's rule and the FLOPs count are plain Python.
    out["plan_shape"] = np.array(planned_shape(spec["plan"]))  # (TensorFlow's: the test's)
    out["flops"] = np.asarray(flops.training_flops(model.config, 10, 12))
    assert EncoderBlock.__module__ == "translator.layers.encoder_block"

    out["tensorflow_imported"] = np.array(
        any(name.split(".")[0] == "tensorflow" for name in sys.modules)
    )
    np.savez(directory / "jax.npz", **out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
