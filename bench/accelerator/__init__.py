"""`bench.accelerator`: train and decode on a lent GPU (no TensorFlow) through Keras' JAX backend.

1. Here: `python -m bench.accelerator prepare` writes `.accelerator/` (the wheels the image
   lacks, a vocabulary, tf.data training batches with static shapes, eval sources).
2. There: `python -m bench.accelerator run --out DIR` measures, plans, trains for `--minutes`
   with `JaxTrainer`, decodes with beam 4 (`JaxDecoder`), scores, writes accelerator.json.
3. Here: `python -m bench.accelerator publish DIR/accelerator.json` writes the section.

There, `python -m bench.accelerator speeds --out DIR` times every planner shape at one batch
size (tokens/s and MFU, one compiled step each) into DIR/speeds.json.

`prepare` prints the device call (carry [".accelerator"]); bench/RESULTS.md has the runs.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / ".accelerator"  # what `prepare` writes and the device call carries
MANIFEST, EVAL_FILE, RESULTS_FILE = "manifest.json", "eval.npz", "accelerator.json"
WHEELS = ("keras", "optree", "namex")  # what the GPU image lacks, at the versions here
# The planner picks a power of two; 32,768 would need far more tokens than 3 minutes buy.
BATCH_TOKENS = (1024, 2048, 4096, 8192, 16384)
BUCKET_BOUNDARIES = (16, 24, 32, 48, 96)  # one compiled step a bucket: few, wide ones
BATCH_SIZE_MULTIPLE = 8  # rows of a batch (tensor cores)
MAX_LENGTH = 96  # the longest pair kept, either side (Multi30k's longest is ~80)


def bundle_file(bundle: Path, batch_tokens: int) -> Path:
    """The file of one batch size's epoch of training batches."""
    return bundle / f"batches-{batch_tokens}.npz"
