"""`bench.accelerator`: `translator recipe` itself on a lent GPU (JAX, no TensorFlow there).

1. Here: `python -m bench.accelerator prepare` writes `.accelerator/`: the wheels the GPU
   image lacks, and `work/`, a recipe work directory made as far as training (Multi30k,
   its vocabulary, and the corpus prepared once with its validation set: id arrays that
   training reads without TensorFlow).
2. There: `python -m bench.accelerator run --out DIR` runs the product, nothing of its own:
   `translator recipe --workdir <a copy of work/> --minutes 3 --set train.backend=jax`
   (the plan, training, beam-4 test report); the export stage waits for TensorFlow. It
   writes DIR/accelerator.json from what the run left (plan.json, the run's record, the
   test report, TensorBoard's scalars, the log). `run --set KEY=VALUE` passes settings on
   to the recipe: a trial of what the plan does not choose (a larger batch, its learning
   rate), scored on the validation set's BLEU like any run.
3. Here: `python -m bench.accelerator publish DIR/accelerator.json [--speeds speeds.json]`
   writes the section of bench/RESULTS.md.

There, `python -m bench.accelerator speeds --out DIR --plan DIR/plan.json` times the shapes
the run's plan timed, each at the batch the plan timed it at, as a run trains them (the
planner's own `training.planning.timing.measure_speed` on every bucket of the prepared corpus,
where the plan timed one) into DIR/speeds.json, beside the bf16 matmul rate (MFU); without
`--plan`, every planner shape at `--batch-tokens`. `publish --speeds` puts them beside the
plan's.

`prepare` prints the device call (carry [".accelerator"]); bench/RESULTS.md has the runs.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / ".accelerator"  # what `prepare` writes and the device call carries
WORK = "work"  # the recipe's work directory inside the bundle
MANIFEST, RESULTS_FILE, SPEEDS_FILE = "manifest.json", "accelerator.json", "speeds.json"
# The recipe's settings there, given the same here so the prepared corpus is the one read.
SETTINGS = ("train.backend=jax",)
# What the product imports that a JAX-only GPU image (JAX, PyTorch, sentencepiece,
# sacreBLEU) may lack, at this environment's versions: Keras and its own, the event writer,
# YAML configs, matplotlib's charts, and the sentence splitter of translations.
WHEELS = (
    "keras", "optree", "namex", "absl-py", "rich", "pygments", "markdown-it-py", "mdurl",
    "h5py", "tensorboardX", "protobuf", "pyyaml", "tqdm", "matplotlib", "pillow",
    "fonttools", "kiwisolver", "contourpy", "cycler", "pyparsing", "python-dateutil", "six",
    "packaging", "sentencex",
)  # fmt: skip
