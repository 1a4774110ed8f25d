"""`bench.accelerator`: train and decode on a lent GPU through Keras' JAX backend.

The machines this project is lent now and then (one H100 or H200) have JAX, sentencepiece
and sacreBLEU but no TensorFlow, no package registry, and take at most 64 MiB along. So
the work is split where TensorFlow ends:

1. Here, with TensorFlow: `python -m bench.accelerator prepare` writes `.accelerator/`
   (ignored by git): the wheels the image lacks (keras, optree, namex, for its Python
   3.12), a Multi30k EN->DE vocabulary, one epoch of training batches per batch size the
   planner may choose, made by our tf.data pipeline with static shapes and written as
   padded id arrays, and the validation and test sources as `translator.text.prepare`
   makes them for every other decoder.
2. There, without TensorFlow: `python -m bench.accelerator run --out DIR` measures the
   bf16 matmul rate, plans for the measured speed with the planner's rule, trains the
   plan for `--minutes` (3) in mixed bfloat16 with `training.jax_step.JaxTrainer`,
   decodes validation and test with beam 4 (`JaxDecoder`), detokenizes with the
   sentencepiece package, scores with sacreBLEU and writes `DIR/accelerator.json`.
3. Here again: `python -m bench.accelerator publish DIR/accelerator.json` writes the
   accelerator section of bench/RESULTS.md.

The `device` call (the command is printed by `prepare`, with `carry: [".accelerator"]`)::

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
        .accelerator/wheels/*.whl && PYTHONPATH=/tmp/site:. python3 -m bench.accelerator \
        run --out $OUT

A `-m bench` test runs all three on this CPU, tiny, with TensorFlow blocked in `run`.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What `prepare` writes and the device call carries.
BUNDLE = REPO / ".accelerator"
MANIFEST = "manifest.json"
SPM_MODEL = "spm.model"
EVAL_FILE = "eval.npz"
RESULTS_FILE = "accelerator.json"
# The wheels the GPU image lacks, at the versions the tests here run with.
WHEELS = ("keras", "optree", "namex")
# Batch sizes prepared: the planner picks a power of two (training.plan.choose_batch_tokens);
# 32,768 would need ~10^9 tokens bought in 3 minutes, far beyond an H200 on this corpus.
BATCH_TOKENS = (1024, 2048, 4096, 8192, 16384)
# Static shapes: one compiled step per bucket. Few, wide buckets keep compiling short.
BUCKET_BOUNDARIES = (16, 24, 32, 48, 96)
# Rows of a batch are a multiple of this (tensor cores).
BATCH_SIZE_MULTIPLE = 8
# The longest pair kept, either side, special tokens included (Multi30k's longest is ~80).
MAX_LENGTH = 96


def bundle_file(bundle: Path, batch_tokens: int) -> Path:
    """The file of one batch size's epoch of training batches."""
    return bundle / f"batches-{batch_tokens}.npz"
