"""`recipe --distill-from`: the teacher, checked against the corpus, and timed beside students.

The teacher is a model or run directory (or a recipe's work directory), or a Marian
model (OPUS-MT's files, Hugging Face's MarianMT), imported into the work directory first
as `--init-from` imports one. It must translate the corpus' languages with a vocabulary
that covers its text: else one error line, before the work directory is written (for
Multi30k without `--mirror`, the vocabulary is checked once the data stage has the files).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from training.planning.rules import Shape
from training.recipe.pretrained import imported_once
from training.recipe.settings import RecipePaths, RecipeSettings
from training.recipe.workdir import RECORD_FILE
from translator.artifacts import model_languages, read_model_dir, resolve_model_dir
from translator.config import TransformerConfig
from translator.constants import UNK_ID
from translator.errors import ConfigError
from translator.io import read_lines
from translator.marian import is_marian_model

# Lines of each side read to check that the teacher's vocabulary covers the corpus.
COVERAGE_SAMPLE_LINES = 2000
# More unknown pieces than this share of a side's: the vocabulary is not the corpus'.
MAX_UNKNOWN_SHARE = 0.02
# Sentences timed per model, and the output length each is held to (its source's + 1).
TIMED_SENTENCES = 500
# Each model decodes them this many times; its fastest round counts.
TIMING_ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Teacher:
    """The teacher model, found and read (not yet loaded)."""

    # What `--distill-from` named.
    source: Path
    # Its model directory (a Marian model's import).
    directory: Path
    config: TransformerConfig
    languages: tuple[str | None, str | None]


@dataclasses.dataclass(frozen=True)
class DecodeTiming:
    """The teacher's and each student's beam search on the same sentences."""

    # Seconds the teacher took, and the sentences (held to equal lengths).
    teacher_seconds: float
    sentences: int
    # Target tokens each decoded (EOS included): the same for every model.
    tokens: int
    # Per student shape name, its seconds.
    student_seconds: dict[str, float]
    # Wall time of the whole timing, building and tracing included.
    wall_seconds: float

    @property
    def teacher_sentences_per_second(self) -> float:
        return self.sentences / self.teacher_seconds

    def speedups(self) -> dict[str, float]:
        """Each student's speed over the teacher's."""
        return {name: self.teacher_seconds / s for name, s in self.student_seconds.items()}


def find_teacher(paths: RecipePaths, source: Path) -> Teacher:
    """The teacher's model directory, a Marian model imported into `WORKDIR/teacher`.

    Raises:
        ConfigError: naming `--distill-from` and what is wrong with it.
    """
    if is_marian_model(source):
        directory = imported_once("--distill-from", source, paths.teacher)
    else:
        # A recipe's work directory: its run.
        path = source / "run" if (source / RECORD_FILE).is_file() else source
        try:
            directory = resolve_model_dir(path)
        except Exception as error:  # ModelDirError and OSError name the path
            raise ConfigError(f"--distill-from: {error}") from None
    files = read_model_dir(directory)
    return Teacher(source, directory, files.model_config, model_languages(files.metadata))


def check_languages(teacher: Teacher, langs: tuple[str, str]) -> None:
    """Refuses a teacher of other languages than the corpus'.

    Raises:
        ConfigError: one line naming both pairs.
    """
    for side, ours, theirs in zip(("source", "target"), langs, teacher.languages, strict=True):
        if theirs is not None and theirs != ours:
            raise ConfigError(
                f"--distill-from {teacher.source}: translates {teacher.languages[0]}->"
                f"{teacher.languages[1]}, but the corpus is {langs[0]}->{langs[1]} "
                f"(its {side} language differs)"
            )


def check_coverage(teacher: Teacher, files: tuple[Path, Path]) -> None:
    """Refuses a teacher whose vocabulary does not cover the corpus' text.

    Raises:
        ConfigError: one line naming the file and its share of unknown pieces.
    """
    from translator.host_text import HostText

    text = HostText(teacher.directory / "vocab")
    for side, path in zip(("source", "target"), files, strict=True):
        lines = read_lines(path, COVERAGE_SAMPLE_LINES)
        ids = [i for line in text.encode(lines, side) for i in line]
        unknown = sum(i == UNK_ID for i in ids) / max(len(ids), 1)
        if unknown > MAX_UNKNOWN_SHARE:
            raise ConfigError(
                f"--distill-from {teacher.source}: its vocabulary does not cover {path} "
                f"({unknown:.0%} of the {side} pieces of its first {len(lines):,} lines are "
                f"unknown, more than {MAX_UNKNOWN_SHARE:.0%}); distil with a teacher of "
                "this corpus' languages and script"
            )


def sample_files(settings: RecipeSettings, langs: tuple[str, str]) -> tuple[Path, Path] | None:
    """The files to check coverage on before anything is written (None: none yet)."""
    if settings.train:
        return settings.train[0].files
    if settings.mirror:
        mirror = Path(settings.mirror)
        files = tuple(mirror / f"train.{lang}.gz" for lang in langs)
        if all(path.is_file() for path in files):
            return files  # type: ignore[return-value]
    return None


def time_decoding(
    teacher: Teacher, students: tuple[Shape, ...], sources: list[str], beam_size: int
) -> DecodeTiming:
    """Beam search of the teacher and of each student shape on the same sentences.

    Each sentence's output is held to its source's length + 1 tokens (no EOS before), so
    every model decodes the same tokens whatever its weights: the students are timed
    untrained, built with the teacher's other architecture fields.
    """
    from translator.artifacts import load_model
    from translator.inference import Translator
    from translator.model import Transformer
    from translator.search.config import SearchConfig

    started = time.monotonic()
    files = read_model_dir(teacher.directory)
    search = SearchConfig(
        beam_size=beam_size, max_length_a=1.0, max_length_b=1, min_length=256, length_penalty=0.0
    )
    sample = [line for line in sources if line.strip()][:TIMED_SENTENCES]

    def timed(model) -> tuple[float, int]:
        translator = Translator.from_model(model.for_inference(), files.vocabulary, search)
        translator.translate(sample[:8])  # traces the search
        best = float("inf")
        for _ in range(TIMING_ROUNDS):  # the fastest round: the least disturbed
            began = time.monotonic()
            found = translator.search_segments(sample)
            best = min(best, time.monotonic() - began)
        return best, found.stats.target_tokens

    teacher_seconds, tokens = timed(load_model(files).model)
    student_seconds = {}
    for shape in students:
        config = dataclasses.replace(teacher.config, **shape.model_overrides())
        model = Transformer(config)
        model.build()
        student_seconds[shape.name], _ = timed(model)
    return DecodeTiming(
        teacher_seconds, len(sample), tokens, student_seconds, time.monotonic() - started
    )
