"""The product's JAX training loop against the benchmark loop it replaced, on this CPU.

The loop of `bench/accelerator` at 054f9aa (`JaxTrainer` over batches put on the device up
front, a look at the clock every 20 updates) against what `translator train` runs on JAX
now (`training.engines.jax_engine`, timed as the planner times a shape): the same planner shape,
batch tokens and dtype policy, on the same vocabulary, a fresh process per loop and round,
taking turns. Issue 61's target: the product's updates/s at least 0.95x the old loop's.
The base is checked out from this repository's history into a temporary worktree (or
given: `--base DIR`). Not part of `python -m bench`: a comparison with a past commit, as
bench/compare_checkouts.sh is. A report with a target; figures: bench/RESULTS.md.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import harness

render = harness.Template("jax_loop")
SHAPE, BATCH_TOKENS, POLICY = "narrow", 2048, "mixed_bfloat16"  # the old loop's policy
LOOPS = ("product", "base")
BASE = "054f9aa"  # the last commit with bench/accelerator's own loop
TARGET = 0.95

# The old loop's timing, run in the base checkout (its `bench.accelerator.run`).
BASE_CHILD = f"""
import json, os, sys
os.environ["KERAS_BACKEND"] = "jax"
from bench.accelerator.run import Batches, Session, measure
from training.config import RunConfig
from training.planning import SHAPES, with_shape  # (one module there, a package here)
batches_file, vocab_size, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
shape = next(s for s in SHAPES if s.name == "{SHAPE}")
session = Session.of(with_shape(RunConfig(), shape, {BATCH_TOKENS}), vocab_size, 1e4)
batches = Batches(batches_file)
session.compile(batches)
speed = measure(session, batches, {BATCH_TOKENS}, seconds)
print(json.dumps({{"tokens_per_second": speed.tokens_per_second,
                  "tokens_per_update": speed.tokens_per_update}}))
"""
BASE_BATCHES = f"""
import sys
from pathlib import Path
from bench.accelerator.prepare import write_batches
from translator.pipelines.tokenizer import load_vocabulary
write_batches(Path(sys.argv[1]), load_vocabulary(sys.argv[2]), {BATCH_TOKENS}, Path(sys.argv[3]))
"""


def _in_base(base: Path, code: str, *arguments: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(base), "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", code, *arguments], cwd=base, env=env, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"bench.jax_loop: the base checkout failed:\n{done.stderr[-3000:]}")
    return done.stdout


def product_speed(work: Path, seconds: float) -> dict:
    """The product's loop, timed by the planner's `measure_speed` (a child process)."""
    from training.config import DEFAULT_CONFIG, load_config
    from training.planning.rules import SHAPES
    from training.planning.timing import measure_speed
    from training.run import on_backend
    from translator.pipelines.vocabulary import load_vocabulary

    sets = ["train.backend=jax", f"train.precision={POLICY}", "train.strategy=one_device"]
    sets += [f"data.vocabulary={work / 'vocab'}", f"data.prepared={work / 'prepared'}"]
    config, strategy, _ = on_backend(load_config(DEFAULT_CONFIG, sets))
    shape = next(shape for shape in SHAPES if shape.name == SHAPE)
    vocabulary = load_vocabulary(work / "vocab")
    speed = measure_speed(
        shape, BATCH_TOKENS, config, vocabulary, strategy, seconds, updates=10**6,
        every_bucket=True,
    )  # fmt: skip
    return {
        "tokens_per_second": speed.tokens_per_second,
        "tokens_per_update": speed.tokens_per_update,
    }


def section(rounds: list[dict], args, vocab_size: int) -> str:
    """The RESULTS.md section: each loop's best round."""
    best = {
        loop: max(r[loop]["tokens_per_second"] / r[loop]["tokens_per_update"] for r in rounds)
        for loop in LOOPS
    }
    tokens = {loop: max(r[loop]["tokens_per_second"] for r in rounds) for loop in LOOPS}
    ratio = best["product"] / best["base"]
    harness.report_target("JAX loop updates/s, product over the 054f9aa loop", ratio, TARGET, "x")
    verdict = harness.verdict(ratio, TARGET)
    constants = dict(SHAPE=SHAPE, BATCH_TOKENS=BATCH_TOKENS, POLICY=POLICY, TARGET=TARGET)
    return render("section", **{**harness.footer(), **constants, **locals(), "rounds": len(rounds)})


def _rounds(args, data: Path, work: Path) -> tuple[list[dict], int]:
    """The vocabulary and corpus made once, then the loops in turn, `args.rounds` times."""
    from translator.pipelines.prepare import prepare_corpus  # TensorFlow: here only

    vocabulary = harness.vocabulary(work / "vocab", data)
    from training.config import DEFAULT_CONFIG, load_config

    pipeline = load_config(DEFAULT_CONFIG).data.pipeline  # the run's length limits
    train = (data / name for name in harness.TRAIN)
    prepare_corpus(*train, vocabulary, work / "prepared", pipeline)
    _in_base(args.base, BASE_BATCHES, str(data), str(work / "vocab"), str(work / "old.npz"))
    vocab_size, rounds = vocabulary.target_vocab_size, []
    for number in range(args.rounds):
        product = harness.run_child(
            "jax_loop", "--child", "product", "--work", str(work), "--base", str(args.base),
            "--seconds", str(args.seconds), env={"KERAS_BACKEND": "jax"},
        )  # fmt: skip
        output = _in_base(
            args.base, BASE_CHILD, str(work / "old.npz"), str(vocab_size), str(args.seconds)
        )
        rounds.append({"product": product, "base": json.loads(output.strip().splitlines()[-1])})
        print(f"round {number + 1}: {json.dumps(rounds[-1])}", flush=True)
    return rounds, vocab_size


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("jax_loop", __doc__)
    parser.add_argument("--base", type=Path, help=f"a checkout of {BASE} (default: made)")
    parser.add_argument("--seconds", type=float, help="timed training per loop and round")
    parser.add_argument("--rounds", type=int, help="rounds of both loops, taking turns")
    for internal in ("--child", "--work", "--child-out"):
        parser.add_argument(internal, help=argparse.SUPPRESS)
    args = harness.parse(parser, argv, seconds=(30.0, 5.0), rounds=(3, 1))
    if args.child:
        Path(args.child_out).write_text(json.dumps(product_speed(Path(args.work), args.seconds)))
        return 0
    data = harness.find_data(args.data)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        git = ["git", "-C", str(harness.REPO), "worktree"]
        made = args.base is None
        if made:
            args.base = work / "base"
            subprocess.run([*git, "add", "--detach", str(args.base), BASE], check=True)
        try:
            rounds, vocab_size = _rounds(args, data, work)
        finally:
            if made:
                subprocess.run([*git, "remove", "--force", str(args.base)], check=False)
    return harness.publish(args, "jax_loop", section, rounds, args, vocab_size)
