"""`recipe --distill-from`: the teacher's translations of the training sources.

Sequence-level knowledge distillation (Kim & Rush 2016): the student learns the
teacher's beam output instead of the human references. The sources are translated in
chunks of `CHUNK_LINES`, each written atomically, so a killed job loses one chunk at
most and a rerun goes on from the next; the joined corpus is kept in `WORKDIR/distilled`
with a record of the teacher and beam that made it, and reused by later runs.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from training.recipe.corpus import RecipeCorpus
from training.recipe.settings import RecipePaths, TrainFiles
from training.recipe.teacher import Teacher
from translator.errors import ConfigError
from translator.io import atomic_file, count_lines, iter_lines, write_atomic

if TYPE_CHECKING:  # pragma: no cover
    from translator.engines import LoadedTranslator
    from translator.inference import Translations

# Source lines a chunk holds: what a kill can lose.
CHUNK_LINES = 1000
# The record beside each distilled corpus: which teacher, beam and sources made it.
RECORD_SUFFIX = ".json"
Record = dict[str, str | int]


@dataclasses.dataclass(frozen=True)
class Distilled:
    """One training corpus, its targets the teacher's translations."""

    files: TrainFiles
    lines: int
    # Seconds the teacher translated for (this run's and any interrupted run's), and the
    # target tokens it wrote (EOS included).
    seconds: float
    target_tokens: int

    @property
    def tokens_per_second(self) -> float:
        return self.target_tokens / self.seconds if self.seconds else 0.0


def distilled_corpora(
    paths: RecipePaths,
    corpus: RecipeCorpus,
    teacher: Teacher,
    beam_size: int,
    pairs: int = 0,
) -> tuple[Distilled, ...]:
    """Each training corpus with the teacher's translations as targets (made or reused).

    Args:
        paths: The work directory's paths.
        corpus: The data stage's corpora.
        teacher: The teacher.
        beam_size: The teacher's beam.
        pairs: Translate only the first `pairs` pairs of each corpus (0: all).

    Raises:
        ConfigError: the work directory holds a corpus another teacher or beam made.
    """
    out = paths.workdir / "distilled"
    out.mkdir(parents=True, exist_ok=True)
    translator = _LazyTranslator(teacher, beam_size)
    made = []
    for index, files in enumerate(corpus.train):
        name = f"train{index}" if len(corpus.train) > 1 else "train"
        target = out / f"{name}.{corpus.target_lang}.gz"
        record = _record(teacher, beam_size, files, pairs)
        made.append(_distil(files, target, record, pairs, translator, corpus.source_lang))
    return tuple(made)


class _LazyTranslator:
    """The teacher's `Translator`, loaded once and only when a chunk needs it."""

    def __init__(self, teacher: Teacher, beam_size: int):
        self.teacher, self.beam_size = teacher, beam_size
        self._loaded: dict[str, LoadedTranslator] = {}

    def translate(self, lines: list[str], tag: str) -> Translations:
        from translator.engines import load_translator
        from translator.engines.base import InferenceOptions
        from translator.search.config import SearchConfig

        if tag not in self._loaded:
            # A training line is one segment, as the SavedModel's signatures take one.
            options = InferenceOptions(tag=tag, split=False)
            search = SearchConfig(beam_size=self.beam_size)
            self._loaded[tag] = load_translator(self.teacher.directory, search, options)
        return self._loaded[tag].translator.search(lines)


def _record(teacher: Teacher, beam_size: int, files: TrainFiles, pairs: int) -> Record:
    return {
        "teacher": str(teacher.directory.resolve()),
        "beam_size": beam_size,
        "source": str(files.source.resolve()),
        "tag": files.tag,
        "pairs": pairs,
    }


def _distil(
    files: TrainFiles,
    target: Path,
    record: Record,
    pairs: int,
    translator: _LazyTranslator,
    source_lang: str,
) -> Distilled:
    """One corpus: reused when its record matches, else translated chunk by chunk."""
    record_file = target.with_suffix(RECORD_SUFFIX)
    source = target.with_name(target.name.replace(target.suffixes[0], f".{source_lang}"))
    if target.is_file() and record_file.is_file():
        kept = json.loads(record_file.read_text("utf-8"))
        if kept["made_by"] != record:
            raise ConfigError(
                f"{target}: translated by another teacher or beam ({kept['made_by']}); "
                "use a new work directory"
            )
        print(f"  already translated: {target} ({kept['lines']:,} lines)", flush=True)
        return _distilled(files, source if pairs else files.source, target, kept)
    total = count_lines(files.source)
    if pairs:
        total = min(total, pairs)
    chunks = target.parent / f".{target.name}.chunks"
    chunks.mkdir(exist_ok=True)
    seconds, tokens = _translate_chunks(files, chunks, total, record, translator)
    with atomic_file(target, compress=True) as sink:
        for chunk in sorted(chunks.glob("*.txt")):
            sink.write(chunk.read_bytes())
    if pairs:  # the sources the student trains on: the translated ones
        with atomic_file(source, compress=True) as sink:
            for line in _first_lines(files.source, total):
                sink.write(f"{line}\n".encode())
    kept = {"made_by": record, "lines": total, "seconds": seconds, "target_tokens": tokens}
    write_atomic(record_file, json.dumps(kept, indent=2))
    shutil.rmtree(chunks)
    return _distilled(files, source if pairs else files.source, target, kept)


def _distilled(files: TrainFiles, source: Path, target: Path, kept: dict) -> Distilled:
    student = dataclasses.replace(files, source=source, target=target)
    return Distilled(student, kept["lines"], kept["seconds"], kept["target_tokens"])


def _translate_chunks(
    files: TrainFiles, chunks: Path, total: int, record: Record, translator: _LazyTranslator
) -> tuple[float, int]:
    """Translates the chunks not yet written; returns the seconds and tokens of all.

    Each chunk's time and tokens are kept beside it, so a resumed job reports the whole.
    """
    state = chunks / "chunks.json"
    done = json.loads(state.read_text("utf-8")) if state.is_file() else {}
    if done and done.get("made_by") != record:
        raise ConfigError(f"{chunks}: begun by another teacher or beam; delete it")
    done = {"made_by": record, "chunks": done.get("chunks", {})}
    lines = _first_lines(files.source, total)
    finished = 0
    for number, start in enumerate(range(0, total, CHUNK_LINES)):
        batch = [next(lines) for _ in range(min(CHUNK_LINES, total - start))]
        name = f"{number:06d}.txt"
        if (chunks / name).is_file() and name in done["chunks"]:
            finished += len(batch)
            continue
        began = time.monotonic()
        found = translator.translate(batch, files.tag)
        text = "".join(f"{line}\n" for line in found.texts)
        write_atomic(chunks / name, text)
        done["chunks"][name] = [time.monotonic() - began, found.stats.target_tokens]
        write_atomic(state, json.dumps(done))
        finished += len(batch)
        spent = sum(seconds for seconds, _ in done["chunks"].values())
        rate = finished / spent if spent else 0.0
        left = (total - finished) / rate if rate else 0.0
        print(
            f"  translated {finished:,}/{total:,} lines ({rate:.0f} lines/s, ~{left:.0f} s left)",
            flush=True,
        )
    seconds = sum(seconds for seconds, _ in done["chunks"].values())
    tokens = sum(count for _, count in done["chunks"].values())
    return seconds, tokens


def _first_lines(path: Path, count: int):
    lines = iter_lines(path)
    for _ in range(count):
        yield next(lines)
