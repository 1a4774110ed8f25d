"""Keras' JAX backend against TensorFlow on this CPU: one model, the same batches, a fresh
process per backend and round, taking turns; each figure the best round's (a report, no
target). Training: `TranslationTrainer.fit` against `JaxTrainer` on `bench.accelerator`'s
static-shape batches; decoding: beam 4 over test_2016_flickr, `Decoder` against
`JaxDecoder`. Without --model, a random `tiny` model. Figures: bench/RESULTS.md.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import harness
from translator.io import read_lines

render = harness.Template("backends")
BACKENDS = ("tensorflow", "jax")
BATCH_TOKENS, DECODE_BATCH_TOKENS = 2048, 4096  # the planner's timing batch; `translate`'s
SOURCE_CUT = 1024  # where the model's source cut is unknown: longer than any sentence


def prepare(model_dir: str, data: Path, work: Path, decode_batches: int = 0) -> dict:
    """Training batches and test source batches (the first `decode_batches`, 0: all) in `work`."""
    from bench.accelerator.prepare import write_batches  # TensorFlow: the parent only
    from translator.artifacts import read_model_dir

    files = read_model_dir(model_dir)
    counts = write_batches(data, files.vocabulary, BATCH_TOKENS, work / "batches.npz")
    lines, source = read_lines(data / harness.TEST_SOURCE), files.vocabulary.source
    batches = harness.source_batches(lines, source, SOURCE_CUT, DECODE_BATCH_TOKENS)
    np.savez(work / "test.npz", *batches[: decode_batches or None])
    return {"model": str(files.directory), "model_file": str(files.model_file), **counts}


def child(backend: str, work: Path, model_file: str, seconds: float) -> dict:
    """One backend's figures, in a process whose `KERAS_BACKEND` is `backend`."""
    import keras

    from bench.accelerator.run import Batches
    from translator.artifacts import read_model_config
    from translator.model import Transformer

    if keras.backend.backend() != backend:
        raise SystemExit(f"bench.backends: Keras runs on {keras.backend.backend()}")

    def model() -> Transformer:
        fresh = Transformer(read_model_config(model_file))
        fresh.build()
        fresh.load_weights(model_file)
        return fresh

    train = _tf_training if backend == "tensorflow" else _jax_training
    figures = {"training_tokens_per_second": train(model(), Batches(work / "batches.npz"), seconds)}
    test = np.load(work / "test.npz")
    return figures | _decode(backend, model(), [test[f"arr_{i}"] for i in range(len(test.files))])


def _tf_training(model, batches, seconds: float) -> float:
    """`TranslationTrainer.fit` over the batches, each shape once untimed: target tokens/s."""
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
    ids = tf.TensorSpec([None, None], tf.int32)
    spec = ({"source_ids": ids, "decoder_input_ids": ids}, ids)
    dataset = tf.data.Dataset.from_generator(
        lambda: (host[i] for i in order), output_signature=spec
    )
    marks: list[tuple[float, float]] = []  # (time, tokens so far) after each update

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            marks.append((time.perf_counter(), float(logs["tokens"])))
            if len(marks) > len(warm) and marks[-1][0] - marks[len(warm) - 1][0] >= seconds:
                self.model.stop_training = True

    fit = dict(epochs=1, steps_per_epoch=len(order), verbose=0, callbacks=[Clock()])
    trainer.fit(dataset.prefetch(4), shuffle=False, **fit)  # the order is the epochs' own
    (t0, k0), (t1, k1) = marks[len(warm) - 1], marks[-1]
    return (k1 - k0) / (t1 - t0)


def _jax_training(model, batches, seconds: float) -> float:
    """`JaxTrainer` over the batches, every shape compiled first: target tokens/s."""
    from bench.accelerator.run import Session, measure
    from training.config import RunConfig

    session = Session(model, RunConfig(), total_updates=1e4)
    session.compile(batches)
    return measure(session, batches, BATCH_TOKENS, seconds).tokens_per_second


def _decode(backend: str, model, batches: list[np.ndarray]) -> dict:
    """Beam-4 translations of the test batches: tokens/s of a pass after a warm-up, the ids."""
    from translator.search import SearchConfig

    if backend == "tensorflow":
        from translator.search.tf_decoder import Decoder
    else:
        from translator.search.jax_decoder import JaxDecoder as Decoder
    decoder = Decoder(model, SearchConfig(beam_size=4))

    def translate() -> list[list[int]]:
        ids = [np.asarray(decoder(batch).ids)[:, 0].tolist() for batch in batches]
        return [harness.until_eos(row) for rows in ids for row in rows]

    seconds, hypotheses = harness.best_of(translate, 1)  # the warm-up traces and compiles
    tokens = sum(map(len, hypotheses))
    return {"decode_tokens_per_second": tokens / seconds, "hypotheses": hypotheses}


def section(info: dict, rounds: list[dict[str, dict]], args) -> str:
    """The RESULTS.md section: the best of the rounds per backend (its local names)."""
    keys = ("training_tokens_per_second", "decode_tokens_per_second")
    tf, jax = ({k: max(r[b][k] for r in rounds) for k in keys} for b in BACKENDS)
    training_ratio, decode_ratio = (jax[k] / tf[k] for k in keys)
    last = rounds[-1]
    pairs = zip(last["tensorflow"]["hypotheses"], last["jax"]["hypotheses"], strict=True)
    same, sentences = sum(a == b for a, b in pairs), len(last["jax"]["hypotheses"])
    return render("section", **{**harness.footer(), **locals(), "rounds": len(rounds)})


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("backends", __doc__, model=True)
    parser.add_argument("--seconds", type=float, help="timed training per backend and round")
    parser.add_argument("--rounds", type=int, help="rounds of both backends, taking turns")
    for internal in ("--child", "--work", "--model-file", "--child-out"):
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = harness.parse(parser, argv, seconds=(30.0, 5.0), rounds=(2, 1))
    if args.child:
        figures = child(args.child, Path(args.work), args.model_file, args.seconds)
        Path(args.child_out).write_text(json.dumps(figures))
        return 0
    data = harness.find_data(args.data, (*harness.TRAIN, harness.TEST_SOURCE))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = args.model or harness.random_model(work / "random", data, "tiny", 1000)
        info = prepare(str(model), data, work, decode_batches=2 if args.short else 0)
        rounds = []
        for number in range(args.rounds):
            rounds.append({})
            for backend in BACKENDS:
                options = ["--child", backend, "--work", str(work), "--seconds", str(args.seconds)]
                options += ["--model-file", info["model_file"]]
                env = {"KERAS_BACKEND": backend}
                rounds[-1][backend] = figures = harness.run_child("backends", *options, env=env)
                print(
                    f"round {number + 1}, {backend}: training "
                    f"{figures['training_tokens_per_second']:,.0f} target tokens/s, beam 4 "
                    f"{figures['decode_tokens_per_second']:,.0f} target tokens/s",
                    flush=True,
                )
    return harness.publish(args, "backends", section, info, rounds, args)
