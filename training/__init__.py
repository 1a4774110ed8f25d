"""Training programs for `translator` models: configs, strategies, checkpoints, `train`."""
