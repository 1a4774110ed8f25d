"""Where a training step's time goes, by op class: `python -m bench.training_profile`.

Trains the comparison shape of `bench.peers` (3+3 layers, d_model 256, FFN 1024, dropout
0.1, 4,096-token batches) on Multi30k with the real pipeline and `TranslationTrainer`
under `fit`, untraced warm-up steps first, then steps under TensorFlow's profiler. Every
op the step's executor ran is summed into a class by its type and name scope; the input
pipeline's ops run on tf.data's own threads, beside the step, and are listed apart. Op
times leave out the executor's own overhead and, on two cores, two ops may overlap, so the
shares say where kernels spend time, not how the wall time splits (`--inter-op-threads 1`
runs one op at a time: each kernel timed alone, at some cost in speed). The MFU is the
model FLOPs/s of as many untraced steps, timed first, over this machine's matmul FLOP/s in
the same precision, measured in the same run. The matmul-only bound is the traced steps'
target tokens over their matmuls' op time: the speed of a step whose every other op took
no time, the most that fusing or removing them could give.
"""

from __future__ import annotations

import collections
import logging
import re
import tempfile
import time
import warnings
from pathlib import Path

import keras
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from bench import harness
from bench.profiling import op_class, share_tables
from bench.training import Variant, make_trainer, matmul_flops_per_second
from translator.pipelines import build_vocabulary, load_vocabulary

# (class, op types or None, name-scope pattern or None): the first match names an op's
# class. AddN sums the gradients of a tensor used twice: the tied embedding's (its lookup and
# the output projection) and every residual branch's.
MATMUL = "matmul (projections, attention scores)"
CLASSES = (
    ("optimizer update (Adam)", None, re.compile(r"(^|/)adam/|Apply|AssignAddVariable|AssignSub")),
    ("gradient clipping (global norm)", None, re.compile(r"clip_by_global_norm|global_norm")),
    (
        MATMUL,
        {"MatMul", "_FusedMatMul", "FusedMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"},
        None,
    ),
    ("loss (XLA: softmax cross-entropy)", {"XLA"}, re.compile(r"cross_entropy")),
    ("layer norm", None, re.compile(r"_norm")),
    ("dropout", {"StatelessRandomUniformFullIntV2"}, re.compile(r"dropout")),
    (
        "embedding gather/scatter, gradient sums",
        {"GatherV2", "ResourceGather", "UnsortedSegmentSum", "ScatterNd", "GatherNd", "AddN"},
        re.compile(r"embedding"),
    ),
    ("attention softmax, masking, head layout", None, re.compile(r"attention")),
    ("bias, activation (feed-forward)", {"BiasAdd", "BiasAddGrad", "Relu", "ReluGrad"}, None),
)
ENVELOPES = {"StatefulPartitionedCall", "PartitionedCall", "While", "StatelessWhile", "If"}
# "scope/node:OpType"; oneDNN's rewrites prefix the type (_MklNative..., _Mkl...).
OP_EVENT = re.compile(r"([^:\s]+):(?:_MklNative|_Mkl)?([A-Za-z0-9_]+)")
TOP_TYPES = 12  # op types listed apart


def classify(space: xplane_pb2.XSpace) -> tuple[collections.Counter, collections.Counter, int]:
    """Op time (picoseconds) by class and by (class, op type), and the input pipeline's."""
    classes, types, pipeline = collections.Counter(), collections.Counter(), 0
    for plane in space.planes:
        names = {key: value.name for key, value in plane.event_metadata.items()}
        for line in plane.lines:
            step = line.name.startswith("tf_Compute")
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if line.name.startswith("tf_data"):
                    pipeline += event.duration_ps if OP_EVENT.fullmatch(name) else 0
                elif step and (match := OP_EVENT.fullmatch(name)):
                    node, op = match.groups()
                    if op not in ENVELOPES:
                        label = op_class(CLASSES, node, op)
                        classes[label] += event.duration_ps
                        types[label, op] += event.duration_ps
                elif step and name == "CpuExecutable::ExecuteAsyncOnStream":  # an XLA program
                    label = op_class(CLASSES, "", "XLA")
                    classes[label] += event.duration_ps
                    types[label, "XLA program"] += event.duration_ps
    return classes, types, pipeline


def matmul_only_bound(classes: collections.Counter, tokens: float) -> float:
    """Target tokens/s if every op but the matmuls took no time: `tokens` over the
    matmul class's op time (`classes` in picoseconds, as `classify` sums them)."""
    return tokens / (classes[MATMUL] / 1e12)


def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("training_profile", __doc__)
    parser.add_argument("--precision", default="float32", help="float32 or mixed_bfloat16")
    parser.add_argument("--steps", type=int, help="profiled steps (default 20; 2 short)")
    parser.add_argument("--set", action="append", default=[], help="a `translator train --set`")
    parser.add_argument(
        "--inter-op-threads",
        type=int,
        metavar="N",
        help="ops TensorFlow runs at once (default: its own choice, 2 on two cores); 1 times "
        "each kernel alone, not slowed by another op on the same cores",
    )
    args = harness.parse(parser, argv, steps=(20, 2))
    if args.inter_op_threads:  # before TensorFlow's runtime starts
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("translator.pipelines").setLevel(logging.ERROR)
    data = harness.find_data(args.data)
    shape = "tiny" if args.short else "small"
    overrides = ("model.overrides={dropout: 0.1}", *args.set)
    variant = Variant(shape, args.precision, args.precision, overrides)
    peak = matmul_flops_per_second(args.precision.removeprefix("mixed_"))
    with tempfile.TemporaryDirectory() as scratch:
        files = [data / name for name in harness.TRAIN]
        build_vocabulary(files[:1], files[1:], Path(scratch) / "vocab", vocab_size=8000)
        vocabulary = load_vocabulary(Path(scratch) / "vocab")
        trainer, dataset, per_call, flops_per_token = make_trainer(variant, data, vocabulary)
        steps = args.steps * per_call
        trainer.fit(dataset, epochs=1, steps_per_epoch=10 * per_call, verbose=0)  # warm-up
        started = time.perf_counter()  # `fit` resets the token count
        trainer.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)  # the speed
        rate = float(trainer.token_counter.result()) / (time.perf_counter() - started)
        tf.profiler.experimental.start(str(Path(scratch) / "trace"))
        started = time.perf_counter()
        trainer.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
        wall = time.perf_counter() - started
        tf.profiler.experimental.stop()
        tokens = float(trainer.token_counter.result())
        keras.config.set_dtype_policy("float32")
        space = xplane_pb2.XSpace()
        trace = next((Path(scratch) / "trace").rglob("*.xplane.pb"))
        space.ParseFromString(trace.read_bytes())
    classes, types, pipeline = classify(space)
    total = sum(classes.values())
    model = rate * flops_per_token
    print(
        f"{shape}, {args.precision}: {rate:,.0f} target tok/s untraced, model "
        f"{model / 1e9:.1f} GFLOP/s against a {peak / 1e9:.0f} GFLOP/s matmul: MFU "
        f"{model / peak:.0%}. {steps} steps traced: {tokens / wall:,.0f} tok/s under the "
        f"profiler, wall {wall:.1f} s, op time {total / 1e12:.1f} s, input pipeline "
        f"{pipeline / 1e12:.1f} s on its own threads"
    )
    bound = matmul_only_bound(classes, tokens)
    overlapped = args.inter_op_threads != 1  # op times inflated by ops sharing the cores
    print(
        f"Matmuls: {bound * flops_per_token / 1e9:.0f} GFLOP/s over their op time "
        f"({bound * flops_per_token / peak:.0%} of the square matmul's). With every other op "
        f"free, the matmul-only bound: {bound:,.0f} tok/s, {bound * wall / tokens:.2f}x the "
        "traced speed"
        + (" (ops overlapped here: read the bound with --inter-op-threads 1)" if overlapped else "")
    )
    print("\n" + share_tables(classes, types, TOP_TYPES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
