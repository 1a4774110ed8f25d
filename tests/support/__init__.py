"""What the tests share: helpers, constants and subprocess scripts; no tests, no fixtures.

Every test folder imports from here (the conftests hold fixtures only, and no test module
imports another test module):

- `paths`: REPO (the checkout under test) and SCRIPTS (the scripts below).
- `layers`: `run_layer_test`, the Keras layer contract every layer test checks.
- `models`: `tiny_model` (a random tiny Transformer), `random_sources`, and `MarkovModel`
  with `markov_probs` (hand-set probabilities, for search-only tests).
- `search`: slow reference searches (full recompute, exhaustive enumeration),
  `compiled` and `hypotheses_of`.
- `corpora`: the corpora: the synthetic copy task (`write_copy_corpus`), pseudo-word
  sentences (`synthetic_sentences`), the command tests' input lines, Multi30k
  (`find_multi30k`), line files read and written, and the pairs a pipeline must produce.
- `runs`: the run configs of the copy task (`tiny_run_config`, `tiny_raw_config`,
  `replace`) and training in its own process (`train_to_end`, checkpoints, signals).
- `cli`: `translator(...)`, the command as a user runs it, the library noise it must not
  print (`NOISE`), and the metadata of the command tests' model.
- `scores`: the `sacrebleu` program's scores, for reference.
- `serving`: the export's and the server's settings, the sentences every comparison uses,
  `Exported` (the server itself: `serving.process.ServerProcess`).
- `bench`: the fixed footer (command, date, machine) of the benchmarks' template tests.
- `scripts/`: run as subprocesses, never imported: `train_run.py`,
  `strategy_equivalence.py` and `saved_model_reference.py` (imports no project code).
"""
