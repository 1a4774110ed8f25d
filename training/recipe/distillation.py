r"""`translator recipe --distill-from TEACHER`: a small, fast student of a trained model.

    translator recipe --workdir runs/student --minutes 15 --distill-from runs/multi30k

The stages, all within `--minutes` (the whole job, not only training):

1. the data, as the recipe gets it; the teacher is checked first (its languages and its
   vocabulary's coverage of the corpus: one error line, nothing written);
2. the teacher's vocabulary, which the student keeps;
3. the student's shape: each candidate of `training.planning.students` is timed beside
   the teacher, and the largest cut from the teacher that decodes `--student-speedup`
   times faster is taken, else the fastest cut one (or `--student NAME`); it is cut from
   the teacher (`WORKDIR/student-init`: its encoder and some decoder blocks, weights and
   all);
4. the teacher translates the training sources with beam search (`distill`: chunked,
   resumable, kept), unless the student learns the references (`--student-data
   original`, the control); if that would take over half the budget the job stops first
   and says how many pairs fit;
5. the student trains on the teacher's translations (`--student-data both`: beside the
   references), for what is left of the budget after a reserve for stages 6 and 7; a cut
   student as a fine-tuning does (`--init-from`: its validation before the first update,
   the best model kept);
6. the teacher and the student translate each test set, scored side by side, with their
   decoding speeds (the student's report tests it against the teacher's translations);
7. the student's SavedModel, and its CTranslate2 export at the compute type that decodes
   faster here (float32 or int8, timed).

`WORKDIR/distill.json` says how the minutes were split.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from pathlib import Path

from training.config import MODEL_OVERRIDES, Change, ConfigError
from training.planning.students import (
    StudentChoice,
    choose_student,
    named_student,
    student_shapes,
    teacher_blocks,
)
from training.recipe.corpus import RecipeCorpus, languages, prepare_data
from training.recipe.ct2_stage import (
    CT2_COMPUTE_TYPES,
    CT2_TIMED_LINES,
    ctranslate2_exported,
    export_fastest_ctranslate2,
)
from training.recipe.distill import Distilled, distilled_corpora
from training.recipe.reports import RecipeSummary, evaluate_sets, summarize
from training.recipe.settings import RecipePaths, RecipeSettings, start_stage
from training.recipe.stages import export_model, train_model
from training.recipe.teacher import (
    DecodeTiming,
    Teacher,
    check_coverage,
    check_languages,
    find_teacher,
    sample_files,
    time_decoding,
)
from translator.artifacts import (
    METADATA_FILE,
    VOCAB_DIR,
    load_model,
    read_model_dir,
    save_model_dir,
)
from translator.config import ARCHITECTURE_FIELDS
from translator.io import (
    atomic_directory,
    count_lines,
    machine_cache_dir,
    read_lines,
    write_atomic,
)
from translator.pruning import CUT_FROM, keep_decoder_blocks

# What the student learns: the teacher's translations, them beside the references, or
# only the references (the control, with no teacher translation).
STUDENT_DATA = ("distilled", "both", "original")
# Translating the corpus may take at most this share of the budget.
MAX_TRANSLATION_SHARE = 0.5
# Held back from training, beside the predicted translation of the test sets (timed on
# this CPU with 1-2M-parameter models, bench/RESULTS.md): saving the trained model after
# its last update, loading and tracing each evaluated model's search, and the exports.
TRAINING_END_SECONDS = 10.0
EVALUATION_OVERHEAD_SECONDS = 6.0
EXPORT_SECONDS = 15.0
# The export's seconds as last measured on this machine (in `machine_cache_dir()`), held
# back instead of `EXPORT_SECONDS` where there is one: the export is mostly tracing, which
# a slower or busier machine stretches (41 s alone and 99 s beside a test on a 2-core AVX2
# CPU, bench/RESULTS.md).
EXPORT_SECONDS_FILE = "export-seconds.json"
DISTILL_FILE = "distill.json"
# A student cut from its teacher: the model directory its training starts from.
STUDENT_INIT_DIR = "student-init"


@dataclasses.dataclass(frozen=True)
class DistillReport:
    """What the job did and how its minutes went (`distill.json`)."""

    teacher: str
    student: str
    student_reason: str
    student_data: str
    speedups: dict[str, float]
    # Seconds per stage: data, vocabulary, timing, translation, training, evaluation, export
    # (of the run that finished the job: a resumed job counts from its resume).
    seconds: dict[str, float]
    budget_seconds: float
    # The teacher's translation of the corpus: lines and target tokens per second.
    translated_lines: int = 0
    translation_tokens_per_second: float = 0.0
    # The student's CTranslate2 export: target tokens/s per compute type timed ({}: none).
    ctranslate2_tokens_per_second: dict[str, float] = dataclasses.field(default_factory=dict)


def run_distillation(paths: RecipePaths, settings: RecipeSettings) -> RecipeSummary:
    """Every stage in order (see the module docstring); done stages are skipped.

    Raises:
        ConfigError, PipelineError, TrainingError: from the stage that failed.
    """
    assert settings.distill_from is not None
    clock = _Clock()
    budget = settings.minutes * 60
    langs = languages(settings)
    teacher = _checked_teacher(paths, settings, langs)
    corpus = prepare_data(paths, settings)
    if sample_files(settings, langs) is None:
        check_coverage(teacher, corpus.train[0].files)
    clock.lap("data")
    _copy_vocabulary(paths, settings, teacher)
    clock.lap("vocabulary")
    choice, timing = _student(paths, settings, teacher, corpus)
    clock.lap("timing")
    init = _cut_student(paths, teacher, choice)
    clock.lap("cut")
    distilled = _translated(paths, settings, teacher, corpus, timing, budget - clock.total)
    clock.lap("translation")
    export, measured = _export_seconds()
    reserve = _reserve(corpus, timing, choice) + export
    minutes = (budget - clock.total - reserve) / 60
    if minutes <= 0:
        raise ConfigError(
            f"--minutes {settings.minutes:g}: nothing left to train the student after "
            f"{clock.total:.0f} s of data, timing and translation and {reserve:.0f} s held "
            "for evaluation and export; give more minutes"
        )
    print(
        f"  {reserve:.0f} s held back for evaluation and export (the export's {export:.0f} s: "
        f"{'as last measured on this machine' if measured else 'no export measured here yet'})",
        flush=True,
    )
    student = _student_settings(settings, teacher, choice, corpus, distilled, minutes, init)
    student_corpus = dataclasses.replace(corpus, train=student.train)
    # The stage's minutes run from here: its own start (preparing, planning, building the
    # model, which a loaded machine slows) is spent from them, not past the job's end.
    deadline = time.monotonic() + minutes * 60
    train_model(paths, student, student_corpus, (choice.shape, choice.reason), deadline)
    clock.lap("training")
    _evaluate_teacher(paths, settings, corpus, teacher)
    evaluate_sets(paths, student, corpus, baseline=_teacher_reports(paths))
    clock.lap("evaluation")
    exported = _exported(paths)
    export_model(paths, student, corpus)
    ctranslate2 = export_fastest_ctranslate2(paths, settings, corpus)
    clock.lap("export")
    if not exported:  # not a resumed job's (it exported nothing)
        timed = _ctranslate2_timing(corpus, timing, choice) if ctranslate2 else 0.0
        _learn_export_seconds(clock.laps["export"] - timed)
    _write_report(paths, settings, teacher, choice, distilled, clock, budget, ctranslate2)
    return summarize(paths, corpus)


class _Clock:
    """Seconds per stage since the job began."""

    def __init__(self):
        self.began = self.last = time.monotonic()
        self.laps: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.monotonic()
        self.laps[stage] = now - self.last
        self.last = now

    @property
    def total(self) -> float:
        return time.monotonic() - self.began


def _checked_teacher(
    paths: RecipePaths, settings: RecipeSettings, langs: tuple[str, str]
) -> Teacher:
    """The teacher, checked against the corpus before anything of the job is written."""
    teacher = find_teacher(paths, settings.distill_from)
    check_languages(teacher, langs)
    sample = sample_files(settings, langs)
    if sample is not None:
        check_coverage(teacher, sample)
    return teacher


def _copy_vocabulary(paths: RecipePaths, settings: RecipeSettings, teacher: Teacher) -> None:
    """Stage 2: the student keeps the teacher's vocabulary (a copy)."""
    start_stage(settings, "vocabulary", f"vocabulary -> {paths.vocabulary}")
    if (paths.vocabulary / "vocab.json").is_file():
        print("  already there")
        return
    with atomic_directory(paths.vocabulary) as staging:
        shutil.copytree(teacher.directory / "vocab", staging, dirs_exist_ok=True)
    print(f"  the teacher's ({teacher.directory / 'vocab'})", flush=True)


def _student(
    paths: RecipePaths, settings: RecipeSettings, teacher: Teacher, corpus: RecipeCorpus
) -> tuple[StudentChoice, DecodeTiming]:
    """Stage 3: every candidate timed beside the teacher; the rule's choice, or --student."""
    candidates = student_shapes(teacher.config, settings.config.config.model.preset)
    start_stage(settings, "student", f"student shape ({', '.join(s.name for s in candidates)})")
    saved = paths.workdir / "student.json"
    if saved.is_file():  # a resumed job keeps its student (and its timing)
        data = json.loads(saved.read_text("utf-8"))
        timing = DecodeTiming(**data["timing"])
    else:
        sources = read_lines(corpus.valid[0], 1000)
        timing = time_decoding(teacher, candidates, sources, settings.beam_size)
        write_atomic(saved, json.dumps({"timing": dataclasses.asdict(timing)}, indent=2))
    speedups = timing.speedups()
    if settings.student:
        try:
            shape = named_student(candidates, settings.student)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        choice = StudentChoice(shape, speedups, f"--student {shape.name}")
    else:
        choice = choose_student(teacher.config, candidates, speedups, settings.student_speedup)
    print(f"  {choice.shape.describe()}: {choice.reason}", flush=True)
    return choice, timing


def _cut_student(paths: RecipePaths, teacher: Teacher, choice: StudentChoice) -> Path | None:
    """Stage 3's end: a student at the teacher's width, cut from it; None for another."""
    blocks = teacher_blocks(teacher.config, choice.shape)
    if not blocks:
        return None
    out = paths.workdir / STUDENT_INIT_DIR
    numbers = ", ".join(str(block + 1) for block in blocks)
    record = {"model": str(teacher.directory), "decoder_blocks": list(blocks)}
    kept = out / METADATA_FILE
    # Kept for a resumed job; cut again if another student was asked for since.
    if not kept.is_file() or json.loads(kept.read_text("utf-8")).get(CUT_FROM) != record:
        files = read_model_dir(teacher.directory)
        student = keep_decoder_blocks(load_model(files).model, blocks)
        source, target = teacher.languages
        metadata = {
            CUT_FROM: record,
            "config": {"data": {"source_lang": source, "target_lang": target}},
        }
        save_model_dir(out, student, teacher.directory / VOCAB_DIR, metadata)
    print(
        f"  cut from the teacher: its encoder and decoder block(s) {numbers} -> {out}",
        flush=True,
    )
    return out


def _translated(
    paths: RecipePaths,
    settings: RecipeSettings,
    teacher: Teacher,
    corpus: RecipeCorpus,
    timing: DecodeTiming,
    seconds_left: float,
) -> tuple[Distilled, ...]:
    """Stage 4: the teacher's translations of the training sources (none for the control)."""
    out = paths.workdir / "distilled"
    start_stage(settings, "translation", f"the teacher's translations -> {out}")
    if settings.student_data == "original":
        print("  none: the student learns the references (--student-data original)")
        return ()
    if seconds_left <= 0:
        raise ConfigError(
            f"--minutes {settings.minutes:g}: the data and the students' timing took all of "
            "it; give more minutes"
        )
    lines = sum(count_lines(files.source) for files in corpus.train)
    pairs = settings.distill_pairs or lines
    predicted = min(pairs, lines) / timing.teacher_sentences_per_second
    already = (paths.workdir / "distilled").is_dir()
    half = MAX_TRANSLATION_SHARE * seconds_left
    if not already and predicted > half:
        fits = int(half * timing.teacher_sentences_per_second)
        raise ConfigError(
            f"--distill-from: translating {min(pairs, lines):,} training sources would take "
            f"about {predicted / 60:.1f} of the {seconds_left / 60:.1f} minutes left "
            f"(the teacher's beam {settings.beam_size}: "
            f"{timing.teacher_sentences_per_second:.0f} sentences/s here); give "
            f"--distill-pairs {fits:,} (the largest share that fits half), or --minutes "
            f"{math.ceil(settings.minutes + 2 * (predicted - half) / 60)}"
        )
    print(f"  {min(pairs, lines):,} lines, ~{predicted:.0f} s predicted", flush=True)
    return distilled_corpora(paths, corpus, teacher, settings.beam_size, settings.distill_pairs)


def _reserve(corpus: RecipeCorpus, timing: DecodeTiming, choice: StudentChoice) -> float:
    """Seconds held back for evaluating teacher and student, and CTranslate2's timing.

    The export's own seconds come on top (`_export_seconds`).
    """
    lines = sum(count_lines(test.source) for test in corpus.reports)
    rate = timing.teacher_sentences_per_second
    translating = lines / rate + lines / _student_rate(timing, choice)
    overheads = TRAINING_END_SECONDS + 2 * EVALUATION_OVERHEAD_SECONDS
    return translating + _ctranslate2_timing(corpus, timing, choice) + overheads


def _student_rate(timing: DecodeTiming, choice: StudentChoice) -> float:
    """The student's predicted sentences per second (beam search, our engine)."""
    return timing.teacher_sentences_per_second * timing.speedups()[choice.shape.name]


def _ctranslate2_timing(corpus: RecipeCorpus, timing: DecodeTiming, choice: StudentChoice) -> float:
    """Predicted seconds of the export stage's timed CTranslate2 translations."""
    lines = min(CT2_TIMED_LINES, count_lines(corpus.reports[0].source)) if corpus.reports else 0
    return len(CT2_COMPUTE_TYPES) * lines / _student_rate(timing, choice)


def _exported(paths: RecipePaths) -> bool:
    """Whether either export of the student is there already (a resumed job's)."""
    return (paths.export_version / "saved_model.pb").is_file() or ctranslate2_exported(paths)


def _export_seconds() -> tuple[float, bool]:
    """The export's reserve: `(seconds, measured)`, as last measured here, else the default."""
    path = machine_cache_dir() / EXPORT_SECONDS_FILE
    try:
        return float(json.loads(path.read_text("utf-8"))["seconds"]), True
    except FileNotFoundError:
        return EXPORT_SECONDS, False
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"  cannot read {path} ({error}); the export's default reserve is held")
        return EXPORT_SECONDS, False


def _learn_export_seconds(seconds: float) -> None:
    """Keeps an export's seconds for the next job's reserve on this machine."""
    path = machine_cache_dir() / EXPORT_SECONDS_FILE
    try:  # a cache that cannot be written (read-only home) only costs the default reserve
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"seconds": round(max(seconds, 0.0), 1)}) + "\n")
    except OSError as error:
        print(f"  cannot keep the export's seconds in {path}: {error}")


def _student_settings(
    settings: RecipeSettings,
    teacher: Teacher,
    choice: StudentChoice,
    corpus: RecipeCorpus,
    distilled: tuple[Distilled, ...],
    minutes: float,
    init: Path | None,
) -> RecipeSettings:
    """The recipe's settings for training the student: its data, shape, start and minutes.

    `init`: the cut student's model directory, which training starts from.
    """
    architecture = {
        name: getattr(teacher.config, name)
        for name in ARCHITECTURE_FIELDS
        if name not in choice.shape.model_overrides()
    }
    architecture.update(choice.shape.model_overrides())
    config = settings.config.with_values(
        *(Change(MODEL_OVERRIDES.child(name), value) for name, value in architecture.items())
    )
    train = tuple(d.files for d in distilled)
    if settings.student_data != "distilled":
        train += corpus.train
    return dataclasses.replace(
        settings, config=config, train=train, minutes=minutes, init_from=init
    )


def _teacher_reports(paths: RecipePaths) -> Path:
    return paths.workdir / "eval-teacher"


def _evaluate_teacher(
    paths: RecipePaths, settings: RecipeSettings, corpus: RecipeCorpus, teacher: Teacher
) -> None:
    """Stage 6's first half: the teacher on the same test sets, the same search."""
    evaluate_sets(paths, settings, corpus, model=teacher.directory, out=_teacher_reports(paths))


def _write_report(
    paths: RecipePaths,
    settings: RecipeSettings,
    teacher: Teacher,
    choice: StudentChoice,
    distilled: tuple[Distilled, ...],
    clock: _Clock,
    budget: float,
    ctranslate2: dict[str, float],
) -> DistillReport:
    seconds = sum(d.seconds for d in distilled)
    tokens = sum(d.target_tokens for d in distilled)
    report = DistillReport(
        teacher=str(teacher.source),
        student=choice.shape.describe(),
        student_reason=choice.reason,
        student_data=settings.student_data,
        speedups=dict(choice.speedups),
        seconds={stage: round(s, 1) for stage, s in clock.laps.items()},
        budget_seconds=budget,
        translated_lines=sum(d.lines for d in distilled),
        translation_tokens_per_second=tokens / seconds if seconds else 0.0,
        ctranslate2_tokens_per_second=ctranslate2,
    )
    out = paths.workdir / DISTILL_FILE
    if not out.is_file():  # a rerun of a finished job keeps the job's own record
        write_atomic(out, json.dumps(dataclasses.asdict(report), indent=2))
    return report


def describe(paths: RecipePaths, corpus: RecipeCorpus) -> list[str]:
    """The lines `recipe --distill-from` prints after the recipe's summary."""
    report = json.loads((paths.workdir / DISTILL_FILE).read_text("utf-8"))
    lines = [f"student:     {report['student']} ({report['student_reason']})"]
    split = ", ".join(f"{stage} {s:.0f} s" for stage, s in report["seconds"].items())
    total = sum(report["seconds"].values())
    lines.append(f"minutes:     {total / 60:.1f} of {report['budget_seconds'] / 60:g} ({split})")
    if report["ctranslate2_tokens_per_second"]:
        speeds = report["ctranslate2_tokens_per_second"]
        fastest = max(speeds, key=speeds.__getitem__)
        rates = ", ".join(f"{kind} {rate:.0f}" for kind, rate in speeds.items())
        lines.append(
            f"ctranslate2: {paths.workdir / 'export-ct2'}  ({fastest}, the faster: {rates} "
            "target tokens/s)"
        )
    if report["translated_lines"]:
        lines.append(
            f"distilled:   {report['translated_lines']:,} lines by the teacher "
            f"({report['translation_tokens_per_second']:.0f} target tokens/s)"
        )
    for test in corpus.reports:
        ours, theirs = (
            json.loads((where / test.name / "report.json").read_text("utf-8"))
            for where in (paths.report(test.name).parent, _teacher_reports(paths))
        )
        (bleu, teacher_bleu), (chrf, teacher_chrf) = (
            (ours["scores"][metric]["score"], theirs["scores"][metric]["score"])
            for metric in ("bleu", "chrf")
        )
        rate, teacher_rate = (r["timing"]["target_tokens_per_second"] for r in (ours, theirs))
        lines.append(
            f"vs teacher:  {test.name}: BLEU {bleu:.2f} against {teacher_bleu:.2f}, chrF "
            f"{chrf:.2f} against {teacher_chrf:.2f}; {rate:.0f} against {teacher_rate:.0f} "
            f"target tokens/s ({rate / teacher_rate:.2f}x)"
        )
    return lines
