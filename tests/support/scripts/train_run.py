"""Runs `training.run.train` in its own process and saves the final weights.

    python train_run.py CONFIG.yaml RUN_DIR WEIGHTS.npz [--plan]

Used by the resume (SIGKILL) and multi-worker tests; TF_CONFIG comes from the
environment for multi_worker. With --plan, what CONFIG.yaml leaves unset is planned.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from training.config import explicit_keys, load_config
from training.run import PlanRequest, train

if __name__ == "__main__":
    config_path, run_dir, weights_path = sys.argv[1:4]
    planning = None
    if "--plan" in sys.argv[4:]:
        planning = PlanRequest(explicit_keys(config_path))
    result = train(load_config(config_path), run_dir, verbose=0, planning=planning)
    np.savez(weights_path, *result.model.get_weights())
    print(f"steps={result.steps}")
