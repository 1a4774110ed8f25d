"""Where our search's time goes, by op class: `python -m bench.search_profile --model M`.

The search of `translator translate` (beam 4) over test sentences in `Translator`'s batches,
with TensorFlow's per-op step statistics (a TensorFlow 1 session over the same traced graph,
saved and reloaded: the one API that hands them to Python). The method: bench/RESULTS.md.
"""

import re
import tempfile
import time

import tensorflow as tf

from bench import harness
from bench.profiling import MATMUL, MATMULS, OpTimes, share_tables
from translator.artifacts import load_model_dir
from translator.constants import DEFAULT_BATCH_TOKENS
from translator.io import read_lines
from translator.search import Decoder, SearchConfig
from translator.text import default_max_source_length

CACHE = "TensorScatterUpdate ConcatV2 DynamicUpdateSlice XlaDynamicUpdateSlice TensorListSetItem"
CLASSES = (
    ("layer norm", None, re.compile(r"norm", re.I)),
    (MATMUL, MATMULS, None),
    ("softmax, log-softmax", {"Softmax", "LogSoftmax"}, None),
    ("transposes (attention heads' layout)", {"Transpose"}, None),
    (
        "top-k, gather (beam bookkeeping)",
        {"TopKV2", "GatherV2", "GatherNd", "ResourceGather", "ResourceGatherNd"},
        None,
    ),
    ("cache writes, concat", set(CACHE.split()), None),
    ("loop control", {"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"}, None),
    ("casts", {"Cast"}, None),
)
TOP_TYPES = 15  # op types listed apart
# "[device memory] node = OpType(inputs)"; oneDNN's rewrites prefix the type (_MklNative...).
LABEL = re.compile(r"^(?:\[[^\]]*\] )?\S+ = (?:_MklNative|_Mkl)?(\S+?)\(")


def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("search_profile", __doc__, model=True)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--sentences", type=int, help="test sentences (default 1000; 16 short)")
    args = harness.parse(parser, argv, sentences=(1000, 16))
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
    times, wall = OpTimes(CLASSES), 0.0
    for batch in batches:
        metadata = tf.compat.v1.RunMetadata()
        started = time.perf_counter()
        session.run(fetches, {feed: batch}, options=options, run_metadata=metadata)
        wall += time.perf_counter() - started
        for node in (
            node for device in metadata.step_stats.dev_stats for node in device.node_stats
        ):
            match = LABEL.match(node.timeline_label)
            op = match.group(1) if match else node.node_name.split(":")[0]
            times.add(node.node_name, op, node.op_end_rel_micros - node.op_start_rel_micros)
    print(
        f"{len(lines)} sentences, {len(batches)} batches, beam {args.beam_size}, "
        f"traced wall {wall:.2f} s, op time {sum(times.by_class.values()) / 1e6:.2f} s"
    )
    print(share_tables(times.by_class, times.by_type, TOP_TYPES, times.counts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
