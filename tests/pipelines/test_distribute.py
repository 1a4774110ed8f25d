"""make_dataset under tf.distribute: 2 replicas (MirroredStrategy on 2 logical CPUs) each
get their own batches, and over an epoch every kept pair reaches exactly one replica.

Runs in a subprocess: logical devices must be configured before TensorFlow starts.
"""

import json
import os
import subprocess
import sys
import textwrap

from tests.support.corpora import expected_pairs, read_gz_lines, write_lines
from tests.support.paths import REPO
from translator.pipelines.config import PipelineConfig

SCRIPT = textwrap.dedent(
    """
    import collections, json, sys
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from translator.pipelines import PipelineConfig, load_vocabulary, make_dataset

    source, target, vocab, config = sys.argv[1:5]
    vocabulary = load_vocabulary(vocab)
    config = PipelineConfig.from_dict(json.loads(config))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    contexts = []

    def dataset_fn(context):
        contexts.append([context.num_input_pipelines, context.input_pipeline_id])
        return make_dataset(
            source, target, vocabulary, config, training=True, input_context=context
        )

    rows, per_replica = [], [0, 0]
    for features, labels in strategy.distribute_datasets_from_function(dataset_fn):
        parts = zip(
            strategy.experimental_local_results(features["source_ids"]),
            strategy.experimental_local_results(features["decoder_input_ids"]),
            strategy.experimental_local_results(labels),
        )
        for replica, (s, d, l) in enumerate(parts):
            per_replica[replica] += int(l.shape[0])
            assert int(l.shape[0]) * int(l.shape[1]) <= config.batch_tokens  # per replica
            for row in zip(s.numpy().tolist(), d.numpy().tolist(), l.numpy().tolist()):
                rows.append([[i for i in part if i] for part in row])
    print(json.dumps({"contexts": contexts, "per_replica": per_replica, "rows": rows}))
    """
)


def test_mirrored_replicas_share_an_epoch_exactly(multi30k_dir, vocab_dir, vocabulary, tmp_path):
    sources = read_gz_lines(multi30k_dir / "val.en.gz", 401)
    targets = read_gz_lines(multi30k_dir / "val.de.gz", 401)
    source = write_lines(tmp_path / "v.en", sources)
    target = write_lines(tmp_path / "v.de", targets)
    config = PipelineConfig(batch_tokens=512, max_source_length=48, max_target_length=48)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(source),
            str(target),
            str(vocab_dir),
            json.dumps(config.to_dict()),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = json.loads(result.stdout.strip().splitlines()[-1])
    assert output["contexts"] == [[1, 0]]  # one worker: one input pipeline feeding 2 replicas
    assert min(output["per_replica"]) > 0  # both replicas got batches
    pairs, _, _ = expected_pairs(sources, targets, vocabulary, config)
    produced = {}
    for row in output["rows"]:
        key = tuple(tuple(part) for part in row)
        produced[key] = produced.get(key, 0) + 1
    assert produced == dict(pairs)
