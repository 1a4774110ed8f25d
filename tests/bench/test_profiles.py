"""bench.profiles training: a profiler trace's ops summed into classes."""

import collections

import pytest
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from bench.profiles import MATMUL, OTHER, classify, matmul_only_bound, op_class, share_tables
from bench.profiles import TRAINING_CLASSES as CLASSES


def trace(events: dict[str, list[tuple[str, int]]]) -> xplane_pb2.XSpace:
    """An XSpace with one host plane: {line name: [(event name, picoseconds)]}."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    ids = {}
    for line_name, line_events in events.items():
        line = plane.lines.add(name=line_name)
        for name, picos in line_events:
            if name not in ids:
                ids[name] = len(ids) + 1
                plane.event_metadata[ids[name]].name = name
            line.events.add(metadata_id=ids[name], duration_ps=picos)
    return space


def test_ops_are_classed_by_type_then_scope():
    def label(name, op):
        return op_class(CLASSES, name, op)

    assert label("StatefulPartitionedCall/adam/Mul_3", "Mul") == "optimizer update (Adam)"
    projection = "StatefulPartitionedCall/gradient_tape/decoder_block_0_1/feed_forward_1/MatMul"
    assert label(projection, "MatMul").startswith("matmul")
    # A layer norm's Mul is the layer norm's; an attention Transpose the attention's.
    assert label("x/encoder_block_0_1/self_attention_norm_1/mul", "Mul") == "layer norm"
    assert label("x/encoder_block_0_1/self_attention_1/transpose", "Transpose").startswith(
        "attention"
    )
    assert label("x/residual_dropout_1/stateless", "StatelessRandomUniformFullIntV2") == "dropout"
    assert label("x/some/Reshape", "Reshape") == OTHER


def test_classify_sums_step_ops_and_keeps_the_input_pipeline_apart():
    space = trace(
        {
            "tf_Compute/1": [
                ("ExecutorState::Process", 1000),  # the executor's envelope: not an op
                ("StatefulPartitionedCall:StatefulPartitionedCall", 900),  # a call: left out
                ("StatefulPartitionedCall/dense/MatMul:_MklMatMul", 300),  # oneDNN's prefix
                ("StatefulPartitionedCall/adam/Sqrt_1:Sqrt", 50),
                ("CpuExecutable::ExecuteAsyncOnStream", 40),  # the XLA loss program
            ],
            "tf_Compute/2": [("StatefulPartitionedCall/dense_1/MatMul:_MklNativeFusedMatMul", 100)],
            "tf_data_private_threadpool": [("ParallelMapV2/SentencepieceTokenizeOp:Op", 70)],
            "python": [("TFE_Py_FastPathExecute_C", 5000)],
        }
    )
    classes, types, pipeline = classify(space)
    matmul = "matmul (projections, attention scores)"
    loss = op_class(CLASSES, "", "XLA")
    assert classes == {matmul: 400, "optimizer update (Adam)": 50, loss: 40}
    assert types[matmul, "MatMul"] == 300 and types[matmul, "FusedMatMul"] == 100
    assert pipeline == 70
    # The tables: shares of the summed op time, largest first.
    tables = share_tables(classes, types, top_types=2).splitlines()
    assert tables[:5] == [
        "| op class | share of op time |",
        "|---|---|",
        f"| {matmul} | 81.6% |",
        "| optimizer update (Adam) | 10.2% |",
        f"| {loss} | 8.2% |",
    ]
    assert tables[-2:] == [f"| MatMul ({matmul}) | 61.2% |", f"| FusedMatMul ({matmul}) | 20.4% |"]


def test_the_matmul_only_bound_is_tokens_over_the_matmuls_op_time():
    # 2 s of matmuls and 1 s of everything else for 8,000 tokens: 2,667 tok/s as traced,
    # at most 4,000 however cheap the rest became; the rest's time does not enter.
    classes = collections.Counter({MATMUL: 2 * 10**12, "layer norm": 10**12})
    assert matmul_only_bound(classes, 8000.0) == pytest.approx(4000.0)
    classes["layer norm"] = 5 * 10**12
    assert matmul_only_bound(classes, 8000.0) == pytest.approx(4000.0)
    classes[MATMUL] = 4 * 10**12
    assert matmul_only_bound(classes, 8000.0) == pytest.approx(2000.0)
