"""Keras' JAX backend against TensorFlow on this CPU: a fresh process per backend and
round, taking turns; each figure the best round's (a report, no target). Training: each
backend's own training of the product, timed as the planner times a shape
(`training.planning.timing.measure_speed`) on Multi30k prepared once; decoding: one model's
beam 4 over test_2016_flickr, `Decoder` against `JaxDecoder`. Without --model, a random
`tiny` model. Figures: bench/RESULTS.md.
"""

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from bench import harness
from translator.io import read_lines

render = harness.Template("backends")
BACKENDS = ("tensorflow", "jax")
BATCH_TOKENS, DECODE_BATCH_TOKENS = 2048, 4096  # the planner's timing batch; `translate`'s
SHAPE = "narrow"  # the planner's shape the training is timed on (the CPU recipe's)
SOURCE_CUT = 1024  # where the model's source cut is unknown: longer than any sentence


def prepare(model_dir: str, data: Path, work: Path, decode_batches: int = 0) -> dict:
    """The corpus prepared once, and test source batches (the first `decode_batches`, 0:
    all), in `work`."""
    from translator.artifacts import read_model_dir
    from translator.pipelines.prepare import prepare_corpus  # TensorFlow: the parent only

    files = read_model_dir(model_dir)
    from training.config import DEFAULT_CONFIG, load_config

    pipeline = load_config(DEFAULT_CONFIG).data.pipeline  # the run's length limits
    train = (data / name for name in harness.TRAIN)
    prepared = prepare_corpus(*train, files.vocabulary, work / "prepared", pipeline)
    lines, source = read_lines(data / harness.TEST_SOURCE), files.vocabulary.source
    batches = harness.source_batches(lines, source, SOURCE_CUT, DECODE_BATCH_TOKENS)
    np.savez(work / "test.npz", *batches[: decode_batches or None])
    return {
        "model": str(files.directory),
        "model_file": str(files.model_file),
        "vocabulary": str(files.vocabulary.directory),
        "pairs": prepared.kept,
        "shape": SHAPE,
    }


def child(backend: str, work: Path, info: dict, seconds: float) -> dict:
    """One backend's figures, in a process whose `KERAS_BACKEND` is `backend`."""
    import keras

    from translator.artifacts import read_model_config
    from translator.model import Transformer

    if keras.backend.backend() != backend:
        raise SystemExit(f"bench.backends: Keras runs on {keras.backend.backend()}")
    model = Transformer(read_model_config(info["model_file"]))
    model.build()
    model.load_weights(info["model_file"])
    figures = {"training_tokens_per_second": _training(backend, work, info, seconds)}
    test = np.load(work / "test.npz")
    return figures | _decode(backend, model, [test[f"arr_{i}"] for i in range(len(test.files))])


def _training(backend: str, work: Path, info: dict, seconds: float) -> float:
    """Target tokens/s of the product's training of `SHAPE` on this backend, in float32."""
    from training.config import DEFAULT_CONFIG, load_config
    from training.planning.rules import SHAPES
    from training.planning.timing import measure_speed
    from training.run import on_backend
    from translator.pipelines.vocabulary import load_vocabulary

    sets = [f"train.backend={backend}", "train.precision=float32", "train.strategy=one_device"]
    sets += [f"data.vocabulary={info['vocabulary']}", f"data.prepared={work / 'prepared'}"]
    config, strategy, _ = on_backend(load_config(DEFAULT_CONFIG, sets))
    shape = next(shape for shape in SHAPES if shape.name == SHAPE)
    vocabulary = load_vocabulary(info["vocabulary"])
    speed = measure_speed(
        shape, BATCH_TOKENS, config, vocabulary, strategy, seconds, updates=10**6,
        every_bucket=True,
    )  # fmt: skip
    return speed.tokens_per_second


def _decode(backend: str, model, batches: list[np.ndarray]) -> dict:
    """Beam-4 translations of the test batches: tokens/s of a pass after a warm-up, the ids."""
    from translator.search import SearchConfig

    if backend == "tensorflow":
        from translator.backends.tf_decoder import Decoder
    else:
        from translator.backends.jax_decoder import JaxDecoder as Decoder
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
    for internal in ("--child", "--work", "--info", "--child-out"):
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = harness.parse(parser, argv, seconds=(30.0, 5.0), rounds=(2, 1))
    if args.child:
        figures = child(args.child, Path(args.work), json.loads(args.info), args.seconds)
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
                options += ["--info", json.dumps(info)]
                env = {"KERAS_BACKEND": backend}
                rounds[-1][backend] = figures = harness.run_child("backends", *options, env=env)
                print(
                    f"round {number + 1}, {backend}: training "
                    f"{figures['training_tokens_per_second']:,.0f} target tokens/s, beam 4 "
                    f"{figures['decode_tokens_per_second']:,.0f} target tokens/s",
                    flush=True,
                )
    return harness.publish(args, "backends", section, info, rounds, args)
