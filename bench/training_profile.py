"""Where a training step's time goes, by op class: `python -m bench.training_profile`.

`bench.peers`' comparison shape under `fit`, warm-up steps, untimed ones for the speed and
MFU, then steps under TensorFlow's profiler; each op the step ran is summed into a class
(the input pipeline's apart). `--inter-op-threads 1` times each kernel alone. The method and
figures: bench/RESULTS.md.
"""

import re
import tempfile
import time
from pathlib import Path

import keras
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from bench import harness
from bench.profiling import MATMUL, MATMULS, OpTimes, share_tables
from bench.training import Variant, make_trainer, matmul_flops_per_second

# AddN sums the gradients of a tensor used twice: the tied embedding's and every residual's.
EMBEDDING = {"GatherV2", "ResourceGather", "UnsortedSegmentSum", "ScatterNd", "GatherNd", "AddN"}
CLASSES = (
    ("optimizer update (Adam)", None, re.compile(r"(^|/)adam/|Apply|AssignAddVariable|AssignSub")),
    ("gradient clipping (global norm)", None, re.compile(r"clip_by_global_norm|global_norm")),
    (MATMUL, MATMULS, None),
    ("loss (XLA: softmax cross-entropy)", {"XLA"}, re.compile(r"cross_entropy")),
    ("layer norm", None, re.compile(r"_norm")),
    ("dropout", {"StatelessRandomUniformFullIntV2"}, re.compile(r"dropout")),
    ("embedding gather/scatter, gradient sums", EMBEDDING, re.compile(r"embedding")),
    ("attention softmax, masking, head layout", None, re.compile(r"attention")),
    ("bias, activation (feed-forward)", {"BiasAdd", "BiasAddGrad", "Relu", "ReluGrad"}, None),
)
ENVELOPES = {"StatefulPartitionedCall", "PartitionedCall", "While", "StatelessWhile", "If"}
# "scope/node:OpType"; oneDNN's rewrites prefix the type (_MklNative..., _Mkl...).
OP_EVENT = re.compile(r"([^:\s]+):(?:_MklNative|_Mkl)?([A-Za-z0-9_]+)")
TOP_TYPES = 12  # op types listed apart


def classify(space: xplane_pb2.XSpace):
    """Op time (picoseconds) by class and by (class, op type), and the input pipeline's."""
    times, pipeline = OpTimes(CLASSES), 0
    for plane in space.planes:
        names = {key: value.name for key, value in plane.event_metadata.items()}
        for line in plane.lines:
            step = line.name.startswith("tf_Compute")
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if line.name.startswith("tf_data"):
                    pipeline += event.duration_ps if OP_EVENT.fullmatch(name) else 0
                elif step and (match := OP_EVENT.fullmatch(name)):
                    if match.group(2) not in ENVELOPES:
                        times.add(*match.groups(), event.duration_ps)
                elif step and name == "CpuExecutable::ExecuteAsyncOnStream":  # an XLA program
                    times.add("", "XLA", event.duration_ps, "XLA program")
    return times.by_class, times.by_type, pipeline


def matmul_only_bound(classes, tokens: float) -> float:
    """Target tokens/s if every op but the matmuls took no time (op times in picoseconds)."""
    return tokens / (classes[MATMUL] / 1e12)


def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("training_profile", __doc__)
    parser.add_argument("--precision", default="float32", help="float32 or mixed_bfloat16")
    parser.add_argument("--steps", type=int, help="profiled steps (default 20; 2 short)")
    parser.add_argument("--set", action="append", default=[], help="a `translator train --set`")
    parser.add_argument("--inter-op-threads", type=int, metavar="N", help="ops run at once")
    args = harness.parse(parser, argv, steps=(20, 2))
    if args.inter_op_threads:  # before TensorFlow's runtime starts
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    harness.quiet()
    data, shape = harness.find_data(args.data), "tiny" if args.short else "small"
    overrides = ("model.overrides={dropout: 0.1}", *args.set)
    variant = Variant(shape, args.precision, args.precision, overrides)
    peak = matmul_flops_per_second(args.precision.removeprefix("mixed_"))
    with tempfile.TemporaryDirectory() as scratch:
        vocabulary = harness.vocabulary(Path(scratch) / "vocab", data)
        trainer, dataset, per_call, flops_per_token = make_trainer(variant, data, vocabulary)
        steps, measured = args.steps * per_call, []
        trainer.fit(dataset, epochs=1, steps_per_epoch=10 * per_call, verbose=0)  # warm-up
        for traced in (False, True):  # the speed, then the trace (`fit` resets the tokens)
            if traced:
                tf.profiler.experimental.start(str(Path(scratch) / "trace"))
            started = time.perf_counter()
            trainer.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
            elapsed = time.perf_counter() - started
            measured.append((float(trainer.token_counter.result()), elapsed))
        tf.profiler.experimental.stop()
        (untraced, seconds), (tokens, wall) = measured
        keras.config.set_dtype_policy("float32")
        space = xplane_pb2.XSpace()
        space.ParseFromString(next((Path(scratch) / "trace").rglob("*.xplane.pb")).read_bytes())
    rate = untraced / seconds
    classes, types, pipeline = classify(space)
    model, bound = rate * flops_per_token, matmul_only_bound(classes, tokens)
    print(
        f"{shape}, {args.precision}: {rate:,.0f} target tok/s untraced, model "
        f"{model / 1e9:.1f} GFLOP/s against a {peak / 1e9:.0f} GFLOP/s matmul: MFU "
        f"{model / peak:.0%}. {steps} steps traced: {tokens / wall:,.0f} tok/s under the "
        f"profiler, wall {wall:.1f} s, op time {sum(classes.values()) / 1e12:.1f} s, input "
        f"pipeline {pipeline / 1e12:.1f} s on its own threads"
    )
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
