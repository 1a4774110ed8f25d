"""Translates with `load_translator` in a process of its own, counting model builds
(`translator.artifacts.load_model` calls).

    python cached_search.py MODEL_DIR [BATCH_TOKENS]

For the search-cache tests: the sentences and prefixes are the serving tests' (SEARCH,
SENTENCES, PREFIXES). Prints JSON: the n-best texts and scores without and with prefixes,
what the search reports (`describe`), and how many times the Keras model was built
before and after the prefixed translation (batches decoded two at a time, so a small
BATCH_TOKENS sends several prefixed batches at once).
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import translator.artifacts as artifacts
from tests.support.serving import PREFIXES, SEARCH, SENTENCES
from translator.engines import InferenceOptions, load_translator

if __name__ == "__main__":
    builds = []
    load_model = artifacts.load_model

    def counted(files):
        builds.append(files.directory)
        return load_model(files)

    artifacts.load_model = counted
    options = InferenceOptions(*(int(arg) for arg in sys.argv[2:3]), parallel_batches=2)
    translator = load_translator(sys.argv[1], SEARCH, options).translator
    plain = translator.search(SENTENCES)
    built_before_prefixes = len(builds)
    prefixed = translator.search(SENTENCES, prefixes=PREFIXES)
    report = {
        "texts": [[h.text for h in hs] for hs in plain.hypotheses],
        "scores": [[h.score for h in hs] for hs in plain.hypotheses],
        "prefixed": [[h.text for h in hs] for hs in prefixed.hypotheses],
        "described": translator.decoder.describe(),
        "builds": [built_before_prefixes, len(builds)],
        "prefixed_batches": prefixed.stats.batches,
    }
    print(json.dumps(report))
