"""Where our search's time goes, by op class: `python -m bench.search_profile --model M`.

Runs the search of `translator translate` (beam 4 by default) over test sentences in
length-sorted batches, as `Translator` batches them, with TensorFlow's per-op step
statistics on (a TensorFlow 1 session over the same traced graph, saved and reloaded:
the one API that hands them back to Python). Each op's time is summed into a class by
its type and name scope; the table is the share of all op time. Op times overlap on
several cores and leave out the executor's own overhead, so the shares say where
kernels spend time, not how the wall time splits.
"""

from __future__ import annotations

import collections
import re
import tempfile
import time

import tensorflow as tf

from bench import harness
from bench.profiling import op_class, share_tables
from translator.artifacts import load_model_dir
from translator.constants import DEFAULT_BATCH_TOKENS
from translator.io import read_lines
from translator.search import Decoder, SearchConfig
from translator.text import batch_ranges, default_max_source_length, prepare

# (class, op types, name-scope pattern or None): the first match names an op's class.
CLASSES = (
    ("layer norm", None, re.compile(r"norm", re.I)),
    (
        "matmul (projections, attention scores)",
        {"MatMul", "_FusedMatMul", "FusedMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"},
        None,
    ),
    ("softmax, log-softmax", {"Softmax", "LogSoftmax"}, None),
    ("transposes (attention heads' layout)", {"Transpose"}, None),
    (
        "top-k, gather (beam bookkeeping)",
        {"TopKV2", "GatherV2", "GatherNd", "ResourceGather", "ResourceGatherNd"},
        None,
    ),
    (
        "cache writes, concat",
        {
            "TensorScatterUpdate",
            "ConcatV2",
            "DynamicUpdateSlice",
            "XlaDynamicUpdateSlice",
            "TensorListSetItem",
        },
        None,
    ),
    ("loop control", {"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"}, None),
    ("casts", {"Cast"}, None),
)
TOP_TYPES = 15  # op types listed apart
# "[device memory] node = OpType(inputs)"; oneDNN's rewrites prefix the type (_MklNative...).
LABEL = re.compile(r"^(?:\[[^\]]*\] )?\S+ = (?:_MklNative|_Mkl)?(\S+?)\(")


def saveable_search(decoder: Decoder) -> tf.Module:
    """A module holding `decoder.translate`, traced, and the weights it reads, to save."""
    decoder.translate.get_concrete_function()
    module = tf.Module()
    module.weights = [getattr(weight, "value", weight) for weight in decoder.model.weights]
    module.translate = decoder.translate
    return module


def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("search_profile", __doc__)
    parser.add_argument("--model", required=True, help="trained model or run directory")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--sentences", type=int, help="test sentences (default 1000; 16 short)")
    args = harness.parse(parser, argv, sentences=(1000, 16))
    data = harness.find_data(args.data, files=(harness.TEST_SOURCE,))
    lines = read_lines(data / harness.TEST_SOURCE, args.sentences)
    trained = load_model_dir(args.model)
    decoder = Decoder(trained.model.for_inference("model"), SearchConfig(beam_size=args.beam_size))
    limit = default_max_source_length(trained.model_config)
    prepared = prepare(tf.constant(lines), trained.vocabulary.source, limit)
    batches = [  # as `Translator` cuts them: [b, width] each
        prepared.source_ids[start:end, :width].numpy()
        for start, end, width in batch_ranges(prepared.lengths.numpy(), DEFAULT_BATCH_TOKENS)
    ]
    with tempfile.TemporaryDirectory() as scratch:
        signature = decoder.translate.get_concrete_function()
        module = saveable_search(decoder)
        tf.saved_model.save(module, scratch, signatures={"translate": signature})
        graph = tf.Graph()
        with graph.as_default():
            session = tf.compat.v1.Session(graph=graph)
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], scratch)
    definition = meta.signature_def["translate"]
    fetches = {key: value.name for key, value in definition.outputs.items()}
    feed = definition.inputs["source_ids"].name
    for batch in batches:  # warm-up: every shape once
        session.run(fetches, {feed: batch})
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    totals, counts, wall = collections.Counter(), collections.Counter(), 0.0
    by_type = collections.Counter()
    for batch in batches:
        metadata = tf.compat.v1.RunMetadata()
        started = time.perf_counter()
        session.run(fetches, {feed: batch}, options=options, run_metadata=metadata)
        wall += time.perf_counter() - started
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                match = LABEL.match(node.timeline_label)
                op = match.group(1) if match else node.node_name.split(":")[0]
                micros = node.op_end_rel_micros - node.op_start_rel_micros
                label = op_class(CLASSES, node.node_name, op)
                totals[label] += micros
                counts[label] += 1
                by_type[label, op] += micros
    total = sum(totals.values())
    print(
        f"{len(lines)} sentences, {len(batches)} batches, beam {args.beam_size}, "
        f"traced wall {wall:.2f} s, op time {total / 1e6:.2f} s"
    )
    print(share_tables(totals, by_type, TOP_TYPES, counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
