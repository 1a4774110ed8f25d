"""The work directory's record (`recipe.json`): which inputs its results are of.

A recipe skips the stages whose results are there, so a work directory made from other
inputs is refused rather than reused.
"""

from __future__ import annotations

import json

from training.recipe.settings import RecipePaths, RecipeSettings, TrainFiles, one_plain_pair
from translator.errors import ConfigError
from translator.io import write_atomic

RECORD_FILE = "recipe.json"


def check_record(paths: RecipePaths, settings: RecipeSettings, langs: tuple[str, str]) -> None:
    """Writes the record of a new work directory; refuses one that holds other inputs.

    Raises:
        ConfigError: the work directory's record names other inputs.
    """
    inputs: dict[str, object] = {
        "languages": list(langs),
        "train": train_record(settings.train),
        "valid": [str(path.resolve()) for path in settings.valid] if settings.valid else None,
    }
    if settings.valid_tag:
        inputs["valid_tag"] = settings.valid_tag
    if settings.init_from is not None:
        inputs["init_from"] = str(settings.init_from.resolve())
    if settings.clean:
        inputs["clean"] = True
    if settings.distill_from is not None:
        inputs["distill"] = {
            "teacher": str(settings.distill_from.resolve()),
            "student": settings.student,
            "student_speedup": settings.student_speedup,
            "student_data": settings.student_data,
            "pairs": settings.distill_pairs,
        }
    record = paths.workdir / RECORD_FILE
    if record.is_file():
        previous = json.loads(record.read_text("utf-8"))
        if previous != inputs:
            raise ConfigError(
                f"--workdir {paths.workdir} holds a recipe of other inputs ({record}: "
                f"{previous}); use a new work directory"
            )
        return
    paths.workdir.mkdir(parents=True, exist_ok=True)
    write_atomic(record, json.dumps(inputs, indent=2))


def train_record(train: tuple[TrainFiles, ...]) -> object:
    """The corpora as recipe.json records them (one untagged corpus: its two paths)."""
    if not train:
        return "multi30k"
    if one_plain_pair(train):
        return [str(path.resolve()) for path in train[0].files]
    return [
        {
            "files": [str(path.resolve()) for path in corpus.files],
            "weight": corpus.weight,
            "tag": corpus.tag,
        }
        for corpus in train
    ]
