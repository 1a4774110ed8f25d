"""Runs an exported SavedModel the way a consumer without `translator` would.

    python saved_model_reference.py EXPORT_VERSION_DIR SENTENCES_JSON > outputs.json

Imports only tensorflow and tensorflow_text; `translator`, `training` and `serving` are
blocked, so the export provably needs none of them. Prints JSON: both signatures on all
sentences in one call ("batch"), serving_default on each sentence alone ("single"), the
tagged signature on all sentences with each tag of TAGS_JSON (and "") for every sentence
("tagged": {tag: outputs}) and with the tags taking turns ("tagged_mixed"), the
prefixed signature with PREFIXES_JSON ("prefixed"), the sample signature ("sample"), the
aligned signature ("aligned", with "alignments"), and
the modules that were imported from the project ("project_modules", expected empty).

    python saved_model_reference.py VERSION_DIR SENTENCES_JSON [TAGS_JSON [PREFIXES_JSON]]
"""

import importlib.abc
import json
import sys

BLOCKED = ("translator", "training", "serving", "tests")


class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: an export must load without it")
        return None


sys.meta_path.insert(0, _Block())

import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402, F401  (registers the SentencePiece ops)


def outputs(function, sentences, **more):
    inputs = {"inputs": tf.constant(sentences, dtype=tf.string)}
    inputs.update({key: tf.constant(values, dtype=tf.string) for key, values in more.items()})
    result = function(**inputs)
    found = {
        "translations": [
            row.decode("utf-8") if isinstance(row, bytes) else [t.decode("utf-8") for t in row]
            for row in result["translations"].numpy()
        ],
        "scores": result["scores"].numpy().tolist(),
    }
    if "alignments" in result:
        found["alignments"] = [row.decode("utf-8") for row in result["alignments"].numpy()]
    return found


def main() -> None:
    path, sentences = sys.argv[1], json.loads(sys.argv[2])
    tags = json.loads(sys.argv[3]) if len(sys.argv) > 3 else []
    prefixes = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    loaded = tf.saved_model.load(path)
    best, n_best = loaded.signatures["serving_default"], loaded.signatures["n_best"]
    report = {
        "batch": outputs(best, sentences),
        "batch_n_best": outputs(n_best, sentences),
        "single": [outputs(best, [s]) for s in sentences],
    }
    if tags:
        tagged = loaded.signatures["tagged"]
        every = len(sentences)
        report["tagged"] = {t: outputs(tagged, sentences, tags=[t] * every) for t in ["", *tags]}
        turns = [tags[i % len(tags)] for i in range(len(sentences))]
        report["tagged_mixed"] = {"tags": turns, **outputs(tagged, sentences, tags=turns)}
    if prefixes is not None:
        prefixed = loaded.signatures["prefixed"]
        report["prefixed"] = outputs(prefixed, sentences, prefixes=prefixes)
        report["prefixed_empty"] = outputs(prefixed, sentences, prefixes=[""] * len(sentences))
    report["aligned"] = outputs(loaded.signatures["aligned"], sentences)
    if "sample" in loaded.signatures:
        report["sample"] = outputs(loaded.signatures["sample"], sentences)
    report["project_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
