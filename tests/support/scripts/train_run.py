"""Runs `training.run.train` in its own process and saves the final weights.

    python train_run.py CONFIG.yaml RUN_DIR WEIGHTS.npz [CONFIG RUN WEIGHTS ...] [--plan] [--log]

Several runs (triples) train one after the other in this one process, as a user's
program may: what they share is the start-up (seconds of imports), not their state.
Used by the resume (SIGKILL), multi-worker and JAX tests; TF_CONFIG comes from the
environment for multi_worker, the Keras backend from the config's train.backend. With
--plan, what CONFIG.yaml leaves unset is planned; with --log, the run's log lines go to
stderr. With TRANSLATOR_TEST_NO_TENSORFLOW=1 in the environment, importing TensorFlow
raises (as on a JAX-only accelerator machine).
"""

import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

if os.environ.get(NO_TENSORFLOW := "TRANSLATOR_TEST_NO_TENSORFLOW"):  # a JAX-only machine's
    from tests.support.no_tensorflow import block_tensorflow

    block_tensorflow()

import numpy as np

from training.config import explicit_keys, load_config
from training.engines.backend import choose_backend

if __name__ == "__main__":
    paths = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    flags = [arg for arg in sys.argv[1:] if arg.startswith("--")]
    if "--log" in flags:
        logging.basicConfig(level=logging.INFO)
    runs = list(zip(paths[0::3], paths[1::3], paths[2::3], strict=True))
    choose_backend(load_config(runs[0][0]))  # train.backend, before Keras is imported
    from training.planning.lifecycle import PlanRequest
    from training.run import train

    for config_path, run_dir, weights_path in runs:
        config = load_config(config_path)
        planning = PlanRequest(explicit_keys(config_path)) if "--plan" in flags else None
        result = train(config, run_dir, verbose=0, planning=planning)
        np.savez(weights_path, *result.model.get_weights())
        print(f"steps={result.steps}", flush=True)
