"""Runs `training.run.train` in its own process and saves the final weights.

    python train_run.py CONFIG.yaml RUN_DIR WEIGHTS.npz

Used by the resume (SIGKILL) and multi-worker tests; TF_CONFIG comes from the
environment for multi_worker.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from training.config import load_config
from training.run import train

if __name__ == "__main__":
    config_path, run_dir, weights_path = sys.argv[1:4]
    result = train(load_config(config_path), run_dir, verbose=0)
    np.savez(weights_path, *result.model.get_weights())
    print(f"steps={result.steps}")
