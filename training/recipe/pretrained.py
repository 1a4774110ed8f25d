"""`recipe --init-from` a Marian model: OPUS-MT's files or Hugging Face's MarianMT.

The recipe fine-tunes model directories. A Marian model is imported into the work
directory first, once (`translator import marian`'s import, exact against CTranslate2's
converter), and the run starts from that import. The work directory's record holds the
path the user gave, so another model in the same work directory is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from training.recipe.settings import RecipePaths, RecipeSettings
from translator.artifacts import MODEL_FILE
from translator.marian import import_marian, is_marian_model


def with_imported_init(paths: RecipePaths, settings: RecipeSettings) -> RecipeSettings:
    """`settings`, its `--init-from` a model directory: a Marian model's import.

    Anything else (a model or run directory, a .keras file, none) is returned as it is.

    Raises:
        MarianImportError: naming the missing file or unsupported option; nothing written.
    """
    init = settings.init_from
    if init is None or not is_marian_model(init):
        return settings
    return dataclasses.replace(
        settings, init_from=imported_once("--init-from", init, paths.pretrained)
    )


def imported_once(option: str, source: Path, out: Path) -> Path:
    """The Marian model `source` imported into `out`, unless an earlier run did; `out`.

    Raises:
        MarianImportError: naming the missing file or unsupported option; nothing written.
    """
    if (out / MODEL_FILE).is_file():
        print(f"  {option} {source}: a Marian model, imported before ({out})", flush=True)
    else:
        print(f"  {option} {source}: a Marian model, imported -> {out}", flush=True)
        for line in import_marian(source, out).lines():
            print(f"    {line}", flush=True)
    return out
