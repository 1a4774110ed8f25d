"""`recipe --distill-from`'s last stage: the student for CTranslate2, at its faster type.

Which compute type decodes faster depends on the machine and the model's size (on an
AVX2 CPU int8 was slower than float32 for our models), so both are timed.
"""

from __future__ import annotations

import json
import shutil
import time

from training.recipe.corpus import RecipeCorpus
from training.recipe.settings import RecipePaths, RecipeSettings, start_stage
from translator.io import read_lines, write_atomic

# The compute types the student's export is timed at (the faster is kept), on this many
# sources.
CT2_COMPUTE_TYPES = ("float32", "int8")
CT2_TIMED_LINES = 300


# Where the kept export goes in the work directory, and its record (speeds, compute type).
CT2_DIR, CT2_INFO_FILE = "export-ct2", "translator_ct2.json"


def ctranslate2_exported(paths: RecipePaths) -> bool:
    """Whether the job's CTranslate2 export is there already (a resumed job's)."""
    return (paths.workdir / CT2_DIR / CT2_INFO_FILE).is_file()


def export_fastest_ctranslate2(
    paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus
) -> dict[str, float]:
    """Stage 7's second half: the student for CTranslate2, at its fastest compute type.

    float32 and int8 are each exported and timed on the first report set's first
    `CT2_TIMED_LINES` sources (beam search as the reports'); the faster is kept in
    `WORKDIR/export-ct2`. Returns target tokens/s per compute type ({}: not installed).
    """
    out = paths.workdir / CT2_DIR
    start_stage(settings, "export", f"CTranslate2 -> {out}")
    info = out / CT2_INFO_FILE
    if ctranslate2_exported(paths):
        print("  already exported")
        return json.loads(info.read_text("utf-8"))["speeds"]
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        print("  skipped: CTranslate2 is not installed (pip install -e '.[ctranslate2]')")
        return {}
    from translator.artifacts import load_model_dir
    from translator.engines import load_translator
    from translator.engines.base import InferenceOptions
    from translator.engines.ctranslate2_export import export_ctranslate2
    from translator.search.config import SearchConfig

    trained = load_model_dir(paths.run / "model")
    sample = read_lines(corpus.reports[0].source, CT2_TIMED_LINES)
    search = SearchConfig(beam_size=settings.beam_size)
    speeds = {}
    for compute_type in CT2_COMPUTE_TYPES:
        directory = export_ctranslate2(trained, out.with_name(f".ct2-{compute_type}"), compute_type)
        loaded = load_translator(directory, search, InferenceOptions(engine="ctranslate2"))
        began = time.monotonic()
        found = loaded.translator.search(sample)
        speeds[compute_type] = found.stats.target_tokens / (time.monotonic() - began)
    fastest = max(speeds, key=speeds.__getitem__)
    for compute_type in CT2_COMPUTE_TYPES:
        directory = out.with_name(f".ct2-{compute_type}")
        if compute_type == fastest:
            shutil.rmtree(out, ignore_errors=True)
            directory.rename(out)
        else:
            shutil.rmtree(directory)
    write_atomic(info, json.dumps({"compute_type": fastest, "speeds": speeds}, indent=2))
    rates = ", ".join(f"{kind} {rate:.0f}" for kind, rate in speeds.items())
    print(f"  {fastest}, the faster here (target tokens/s: {rates})", flush=True)
    return speeds
