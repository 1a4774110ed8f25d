"""Where a step's time goes, by op class: `python -m bench.profiles training|search`.

training: `bench.peers`' comparison shape under `fit`, warm-up steps, untimed ones for the
speed and MFU, then steps under TensorFlow's profiler; each op the step ran is summed into a
class (the input pipeline's apart). `--inter-op-threads 1` times each kernel alone.

search (`--model M`): the search of `translator translate` (beam 4) over test sentences in
`Translator`'s batches, with TensorFlow's per-op step statistics (a TensorFlow 1 session over
the same traced graph, saved and reloaded: the one API that hands them to Python).

The method and figures: bench/RESULTS.md.
"""

import collections
import re
import tempfile
import time
from collections.abc import Collection, Sequence
from pathlib import Path

import keras
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from bench import harness
from bench.training import Variant, make_trainer, matmul_flops_per_second
from translator.artifacts import load_model_dir
from translator.constants import DEFAULT_BATCH_TOKENS
from translator.io import read_lines
from translator.search import Decoder, SearchConfig
from translator.text import default_max_source_length

OTHER = "other (elementwise, shapes, reductions)"
MATMUL = "matmul (projections, attention scores)"
MATMULS = {"MatMul", "_FusedMatMul", "FusedMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"}
# (class, op types or None, name-scope pattern or None): the first match names an op's class.
Classes = Sequence[tuple[str, Collection[str] | None, re.Pattern | None]]

# AddN sums the gradients of a tensor used twice: the tied embedding's and every residual's.
EMBEDDING = {"GatherV2", "ResourceGather", "UnsortedSegmentSum", "ScatterNd", "GatherNd", "AddN"}
TRAINING_CLASSES = (
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

CACHE = "TensorScatterUpdate ConcatV2 DynamicUpdateSlice XlaDynamicUpdateSlice TensorListSetItem"
BEAM_BOOKKEEPING = {"TopKV2", "GatherV2", "GatherNd", "ResourceGather", "ResourceGatherNd"}
SEARCH_CLASSES = (
    ("layer norm", None, re.compile(r"norm", re.I)),
    (MATMUL, MATMULS, None),
    ("softmax, log-softmax", {"Softmax", "LogSoftmax"}, None),
    ("transposes (attention heads' layout)", {"Transpose"}, None),
    ("top-k, gather (beam bookkeeping)", BEAM_BOOKKEEPING, None),
    ("cache writes, concat", set(CACHE.split()), None),
    ("loop control", {"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"}, None),
    ("casts", {"Cast"}, None),
)
# "[device memory] node = OpType(inputs)"; oneDNN's rewrites prefix the type (_MklNative...).
LABEL = re.compile(r"^(?:\[[^\]]*\] )?\S+ = (?:_MklNative|_Mkl)?(\S+?)\(")
TOP_TYPES = {"training": 12, "search": 15}  # op types listed apart


def op_class(classes: Classes, name: str, op: str) -> str:
    """The class of the op `name` of type `op` (oneDNN's prefix already taken off)."""
    for label, types, scope in classes:
        if (types is not None and op in types) or (scope is not None and scope.search(name)):
            return label
    return OTHER


class OpTimes:
    """Op time by class, by (class, op type) and ops run by class, as ops are `add`ed."""

    def __init__(self, classes: Classes):
        self.classes = classes
        self.by_class, self.by_type = collections.Counter(), collections.Counter()
        self.counts = collections.Counter()

    def add(self, name: str, op: str, spent: float, type_name: str | None = None) -> None:
        label = op_class(self.classes, name, op)
        self.by_class[label] += spent
        self.by_type[label, type_name or op] += spent
        self.counts[label] += 1


def share_tables(
    by_class: collections.Counter,
    by_type: collections.Counter,
    top_types: int,
    counts: collections.Counter | None = None,
) -> str:
    """Markdown: each class's share of the summed op time (and its op count, if given),
    then the `top_types` largest (class, op type) pairs'."""
    total, ops_run = sum(by_class.values()), counts is not None
    lines = ["| op class | share of op time |" + (" ops run |" if ops_run else "")]
    lines.append("|---|---|" + ("---|" if ops_run else ""))
    for label, spent in by_class.most_common():
        count = f" {counts[label]:,} |" if ops_run else ""
        lines.append(f"| {label} | {spent / total:.1%} |{count}")
    lines += ["", "| op type (its class) | share of op time |", "|---|---|"]
    for (label, op), spent in by_type.most_common(top_types):
        lines.append(f"| {op} ({label}) | {spent / total:.1%} |")
    return "\n".join(lines)


def classify(space: xplane_pb2.XSpace):
    """Op time (picoseconds) by class and by (class, op type), and the input pipeline's."""
    times, pipeline = OpTimes(TRAINING_CLASSES), 0
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


def profile_training(args) -> None:
    """Prints the training step's speed, MFU, matmul-only bound and op time by class."""
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
    print("\n" + share_tables(classes, types, TOP_TYPES["training"]))


def profile_search(args) -> None:
    """Prints the search's traced wall time and op time by class, with ops run."""
    data = harness.find_data(args.data, files=(harness.TEST_SOURCE,))
    lines = read_lines(data / harness.TEST_SOURCE, args.sentences)
    trained = load_model_dir(args.model)
    decoder = Decoder(trained.model.for_inference("model"), SearchConfig(beam_size=args.beam_size))
    cut, source = default_max_source_length(trained.model_config), trained.vocabulary.source
    batches = harness.source_batches(lines, source, cut, DEFAULT_BATCH_TOKENS)
    with tempfile.TemporaryDirectory() as scratch:
        signature = decoder.translate.get_concrete_function()
        module = tf.Module()  # the traced search and the weights it reads, to save
        module.weights = [getattr(weight, "value", weight) for weight in decoder.model.weights]
        module.translate = decoder.translate
        tf.saved_model.save(module, scratch, signatures={"translate": signature})
        with tf.Graph().as_default() as graph:
            session = tf.compat.v1.Session(graph=graph)
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], scratch)
    definition = meta.signature_def["translate"]
    fetches = {key: value.name for key, value in definition.outputs.items()}
    feed = definition.inputs["source_ids"].name
    for batch in batches:  # warm-up: every shape once
        session.run(fetches, {feed: batch})
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    times, wall = OpTimes(SEARCH_CLASSES), 0.0
    for batch in batches:
        metadata = tf.compat.v1.RunMetadata()
        started = time.perf_counter()
        session.run(fetches, {feed: batch}, options=options, run_metadata=metadata)
        wall += time.perf_counter() - started
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                match = LABEL.match(node.timeline_label)
                op = match.group(1) if match else node.node_name.split(":")[0]
                times.add(node.node_name, op, node.op_end_rel_micros - node.op_start_rel_micros)
    print(
        f"{len(lines)} sentences, {len(batches)} batches, beam {args.beam_size}, "
        f"traced wall {wall:.2f} s, op time {sum(times.by_class.values()) / 1e6:.2f} s"
    )
    print(share_tables(times.by_class, times.by_type, TOP_TYPES["search"], times.counts))


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("profiles", __doc__, model=True)
    parser.add_argument("step", choices=("training", "search"), help="the step to profile")
    parser.add_argument("--precision", default="float32", help="training: float32, mixed_bfloat16")
    parser.add_argument("--steps", type=int, help="training: steps traced (20; 2 short)")
    parser.add_argument("--set", action="append", default=[], help="training: a train --set")
    parser.add_argument("--inter-op-threads", type=int, metavar="N", help="training: ops at once")
    parser.add_argument("--beam-size", type=int, default=4, help="search: the beam")
    parser.add_argument("--sentences", type=int, help="search: test sentences (1000; 16 short)")
    args = harness.parse(parser, argv, steps=(20, 2), sentences=(1000, 16))
    if args.step == "search" and not args.model:
        parser.error("the search profile needs --model")
    (profile_training if args.step == "training" else profile_search)(args)
    return 0
