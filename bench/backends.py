"""Keras' JAX backend against TensorFlow on this machine: one model, the same batches.

    python -m bench.backends --model RUN_OR_MODEL_DIR [--seconds S] [--rounds N] [--short]

Without --model (a short run's plumbing check), a random `tiny` model is made.

The parent (TensorFlow) makes Multi30k training batches with our tf.data pipeline (static
shapes, as `bench.accelerator` ships them to a GPU) and the test_2016_flickr sources with
the text path. Then, round by round, a fresh process per backend, taking turns:

- training, from the model's weights, on the same batches, in float32, for `--seconds`
  after one untimed update per batch shape: TensorFlow's `TranslationTrainer` under `fit`
  (the product's step; `train.jit_compile` is off by default) and `JaxTrainer` (one XLA
  program per shape); target tokens/s over the real tokens;
- decoding: beam 4 over the test sources in `translate`'s batches, a warm-up pass (tracing,
  compiling) then a timed one: TensorFlow's `Decoder` and `JaxDecoder`; target tokens/s
  over the tokens generated, and how many translations are the same.

A report for users who ask which backend to run on a CPU, no target. Each figure is the
best of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import harness
from translator.constants import EOS_ID, PAD_ID

render = harness.Template("backends")
BACKENDS = ("tensorflow", "jax")
BATCH_TOKENS = 2048  # the planner's timing batch
DECODE_BATCH_TOKENS = 4096  # `translate`'s default batch
# Where the model's source cut is unknown: longer than any Multi30k sentence.
SOURCE_CUT = 1024


def prepare(model_dir: str, data: Path, work: Path, decode_batches: int = 0) -> dict:
    """Training batches and test sources for the children, under `work`.

    `decode_batches` keeps only the first decoding batches (0 = all).
    """
    import tensorflow as tf

    from bench.accelerator.prepare import write_batches
    from translator import text
    from translator.artifacts import read_model_dir
    from translator.io import iter_lines

    files = read_model_dir(model_dir)
    counts = write_batches(data, files.vocabulary, BATCH_TOKENS, work / "batches.npz")
    lines = list(iter_lines(data / harness.TEST_SOURCE))
    prepared = text.prepare(tf.constant(lines), files.vocabulary.source, SOURCE_CUT)
    ranges = list(text.batch_ranges(prepared.lengths.numpy(), DECODE_BATCH_TOKENS))
    ranges = np.array(ranges[:decode_batches] if decode_batches else ranges)
    np.savez(work / "test.npz", source=prepared.source_ids.numpy(), ranges=ranges)
    return {"model": str(files.directory), "model_file": str(files.model_file), **counts}


def child(backend: str, work: Path, model_file: str, seconds: float) -> dict:
    """One backend's figures, in a process whose `KERAS_BACKEND` is `backend`."""
    import keras

    from bench.accelerator.run import Batches
    from translator.artifacts import read_model_config
    from translator.model import Transformer

    if keras.backend.backend() != backend:
        raise SystemExit(f"bench.backends: Keras runs on {keras.backend.backend()}")
    config = read_model_config(model_file)

    def model() -> Transformer:
        fresh = Transformer(config)
        fresh.build()
        fresh.load_weights(model_file)
        return fresh

    batches = Batches.load(work / "batches.npz")
    train = _tf_training if backend == "tensorflow" else _jax_training
    figures = {"training": train(model(), batches, seconds)}
    test = np.load(work / "test.npz")
    return figures | _decode(backend, model(), test["source"], test["ranges"])


def _tf_training(model, batches, seconds: float) -> dict:
    """`TranslationTrainer.fit` over the batches: each shape once untimed, then timed."""
    import keras
    import tensorflow as tf

    from training.config import RunConfig
    from training.optimizer import make_optimizer
    from training.trainer import TranslationTrainer

    run = RunConfig()
    trainer = TranslationTrainer(model, label_smoothing=run.optimizer.label_smoothing)
    trainer.compile(optimizer=make_optimizer(run, model.config.d_model), jit_compile=False)
    trainer.build()
    host = [({k: np.asarray(v) for k, v in f.items()}, np.asarray(y)) for f, y in batches.batches]
    warm = list(batches.shapes().values())
    order = warm + [int(i) for e in range(1, 1000) for i in batches.order(e)]
    names = ("source_ids", "decoder_input_ids")
    spec = (
        {name: tf.TensorSpec([None, None], tf.int32) for name in names},
        tf.TensorSpec([None, None], tf.int32),
    )
    dataset = tf.data.Dataset.from_generator(
        lambda: (host[i] for i in order), output_signature=spec
    )
    marks: list[tuple[float, float]] = []  # (time, tokens so far) after each update

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marks.append((time.perf_counter(), float(logs["tokens"])))
            timed = marks[-1][0] - marks[len(warm) - 1][0] if len(marks) > len(warm) else 0
            if timed >= seconds:
                self.model.stop_training = True

    fit = dict(epochs=1, steps_per_epoch=len(order), verbose=0, callbacks=[Clock()])
    trainer.fit(dataset.prefetch(4), shuffle=False, **fit)  # the order is the epochs' own
    (t0, k0), (t1, k1) = marks[len(warm) - 1], marks[-1]
    return {"updates": len(marks) - len(warm), "tokens_per_second": (k1 - k0) / (t1 - t0)}


def _jax_training(model, batches, seconds: float) -> dict:
    """`JaxTrainer` over the batches: every shape compiled first, then timed."""
    from bench.accelerator.run import Session, measure
    from training.config import RunConfig

    session = Session(model, RunConfig(), total_updates=1e4)
    session.compile(batches)
    speed = measure(session, batches, BATCH_TOKENS, seconds)
    return {"updates": None, "tokens_per_second": speed.tokens_per_second}


def _decode(backend: str, model, source: np.ndarray, ranges: np.ndarray) -> dict:
    """Beam-4 translations of the test sources: tokens/s of a timed pass, and the ids."""
    from translator.search import SearchConfig

    if backend == "tensorflow":
        from translator.search.tf_decoder import Decoder
    else:
        from translator.search.jax_decoder import JaxDecoder as Decoder
    decoder = Decoder(model, SearchConfig(beam_size=4))

    def translate() -> list[list[int]]:
        hypotheses = []
        for start, end, width in ranges:
            for row in np.asarray(decoder(source[start:end, :width]).ids)[:, 0].tolist():
                row = [token for token in row if token != PAD_ID]
                hypotheses.append(row[: row.index(EOS_ID) + 1] if EOS_ID in row else row)
        return hypotheses

    translate()  # warm-up: traces and compiles each batch shape
    started = time.perf_counter()
    hypotheses = translate()
    seconds = time.perf_counter() - started
    tokens = sum(map(len, hypotheses))
    return {"decode_tokens_per_second": tokens / seconds, "hypotheses": hypotheses}


def run_child(backend: str, work: Path, model_file: str, seconds: float) -> dict:
    """`child` in a fresh process on `backend`."""
    out = work / f"{backend}.json"
    command = [sys.executable, "-m", "bench.backends", "--child", backend, "--work", str(work)]
    command += ["--model-file", model_file, "--seconds", str(seconds)]
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(harness.REPO)}
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def section(info: dict, rounds: list[dict[str, dict]], args) -> str:
    """The RESULTS.md section: the best of the rounds per backend."""
    best = {
        backend: {
            key: max(r[backend][key] for r in rounds)
            for key in ("training_tokens_per_second", "decode_tokens_per_second")
        }
        for backend in BACKENDS
    }
    last = rounds[-1]
    same = sum(
        a == b
        for a, b in zip(last["tensorflow"]["hypotheses"], last["jax"]["hypotheses"], strict=True)
    )
    return render(
        "section",
        tf=best["tensorflow"],
        jax=best["jax"],
        training_ratio=best["jax"]["training_tokens_per_second"]
        / best["tensorflow"]["training_tokens_per_second"],
        decode_ratio=best["jax"]["decode_tokens_per_second"]
        / best["tensorflow"]["decode_tokens_per_second"],
        same=same,
        sentences=len(last["jax"]["hypotheses"]),
        info=info,
        args=args,
        rounds=len(rounds),
        **harness.footer(),
    )


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("backends", __doc__)
    parser.add_argument("--model", help="a finished run or model directory (default: random)")
    parser.add_argument("--seconds", type=float, help="timed training per backend and round")
    parser.add_argument("--rounds", type=int, help="rounds of both backends, taking turns")
    parser.add_argument("--child", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--model-file", help=argparse.SUPPRESS)
    args = harness.parse(parser, argv, seconds=(30.0, 5.0), rounds=(2, 1))
    if args.child:
        figures = child(args.child, args.work, args.model_file, args.seconds)
        (args.work / f"{args.child}.json").write_text(json.dumps(figures))
        return 0
    data = harness.find_data(args.data, (*harness.TRAIN, harness.TEST_SOURCE))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = args.model or harness.random_model(work / "random", data, "tiny", 1000)
        info = prepare(str(model), data, work, decode_batches=2 if args.short else 0)
        rounds = []
        for number in range(args.rounds):
            figures = {}
            for backend in BACKENDS:
                result = run_child(backend, work, info["model_file"], args.seconds)
                result["training_tokens_per_second"] = result["training"]["tokens_per_second"]
                figures[backend] = result
                print(
                    f"round {number + 1}, {backend}: training "
                    f"{result['training_tokens_per_second']:,.0f} target tokens/s, beam 4 "
                    f"{result['decode_tokens_per_second']:,.0f} target tokens/s",
                    flush=True,
                )
            rounds.append(figures)
    return harness.publish(args, "backends", section, info, rounds, args)
