"""`recipe --distill-from`: the teacher's corpus, its resumption, bad teachers, the student.

The teacher is a tiny model with random weights and a real SentencePiece vocabulary,
saved as a trained model is: its beam output is what the student must learn, whatever
its quality.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.cli import in_process
from tests.support.corpora import write_copy_corpus, write_lines
from tests.support.missing import DEV_EXTRA, need_module
from tests.support.serving import run_saved_model_reference
from training.planning.rules import SHAPES, Shape
from training.planning.students import (
    choose_student,
    named_student,
    student_shapes,
    teacher_blocks,
)
from training.recipe import distill, distillation
from training.recipe.corpus import RecipeCorpus
from training.recipe.settings import RecipePaths, TrainFiles
from training.recipe.teacher import find_teacher
from training.record import RunRecord
from translator.config import TransformerConfig
from translator.io import machine_cache_dir, read_lines

LANGS = {"config": {"data": {"source_lang": "xx", "target_lang": "yy"}}}


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("distil-corpus")
    source, target = write_copy_corpus(root, 230, seed=11, reverse=True)
    return source.rename(root / "train.xx"), target.rename(root / "train.yy")


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory, corpus_files) -> Path:
    from tests.support.models import tiny_model
    from translator.artifacts import save_model_dir
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("teacher")
    vocab = root / "vocab"
    build_vocabulary(
        [corpus_files[0]], [corpus_files[1]], vocab, vocab_size=39, byte_fallback=False
    )
    # EOS made likely: the random model's sentences end at various lengths. Two decoder
    # blocks: its `student-1` is cut from it (the encoder and the last block).
    model = tiny_model(
        39, seed=6, logit_scale=3.0, eos_bias=2.0, num_encoder_layers=2, num_decoder_layers=2
    )
    return save_model_dir(root / "model", model, vocab, LANGS)


def _distil(workdir: Path, teacher_dir: Path, files: tuple[Path, Path]) -> distill.Distilled:
    paths = RecipePaths(workdir)
    corpus = RecipeCorpus("xx", "yy", (TrainFiles(*files),), files, "given", ())
    (made,) = distill.distilled_corpora(paths, corpus, find_teacher(paths, teacher_dir), 4)
    return made


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, teacher_dir, corpus_files) -> distill.Distilled:
    patch = pytest.MonkeyPatch()
    patch.setattr(distill, "CHUNK_LINES", 60)
    try:
        return _distil(tmp_path_factory.mktemp("whole"), teacher_dir, corpus_files)
    finally:
        patch.undo()


def test_the_distilled_corpus_is_the_teachers_beam_output(
    uninterrupted, teacher_dir, corpus_files, tmp_path, capsys
):
    """Line for line what `translator translate --no-split` gives at the same beam."""
    out = tmp_path / "translate.yy"
    args = ["--model", teacher_dir, "--input", corpus_files[0], "--output", out]
    result = in_process(capsys, "translate", *args, "--beam-size", "4", "--no-split")
    assert result.returncode == 0, result.stderr
    theirs = read_lines(out)
    ours = read_lines(uninterrupted.files.target)
    assert len(ours) == len(theirs) == 230 and ours == theirs
    assert len(set(ours)) > 50  # the teacher's own outputs, not a constant
    assert uninterrupted.files.source == corpus_files[0]  # the sources as they are
    assert uninterrupted.lines == 230 and uninterrupted.target_tokens > 230


def test_a_resumed_translation_equals_an_uninterrupted_one(
    uninterrupted, teacher_dir, corpus_files, tmp_path, monkeypatch
):
    """Killed in its third chunk, the rerun translates only what is missing."""
    monkeypatch.setattr(distill, "CHUNK_LINES", 60)
    real = distill._LazyTranslator.translate
    calls = []

    def dies_in_the_third(self, lines, tag):
        calls.append(len(lines))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, lines, tag)

    monkeypatch.setattr(distill._LazyTranslator, "translate", dies_in_the_third)
    with pytest.raises(KeyboardInterrupt):
        _distil(tmp_path, teacher_dir, corpus_files)
    target = tmp_path / "distilled" / "train.yy.gz"
    assert not target.exists()  # no partial corpus, only the two chunks
    assert len(list((tmp_path / "distilled" / ".train.yy.gz.chunks").glob("*.txt"))) == 2
    calls.clear()

    def counted(self, lines, tag):
        calls.append(len(lines))
        return real(self, lines, tag)

    monkeypatch.setattr(distill._LazyTranslator, "translate", counted)
    resumed = _distil(tmp_path, teacher_dir, corpus_files)
    assert calls == [60, 50]  # the third chunk again, and the fourth: 230 lines in all
    assert read_lines(target) == read_lines(uninterrupted.files.target)
    calls.clear()
    assert resumed.target_tokens == uninterrupted.target_tokens
    # Kept and reused: a third run translates nothing.
    monkeypatch.setattr(distill._LazyTranslator, "translate", dies_in_the_third)
    assert _distil(tmp_path, teacher_dir, corpus_files).lines == 230 and calls == []


def test_a_corpus_of_another_teacher_is_refused(uninterrupted, corpus_files, tmp_path):
    workdir = uninterrupted.files.target.parent.parent
    record = uninterrupted.files.target.with_suffix(".json")
    kept = json.loads(record.read_text())
    assert kept["made_by"]["beam_size"] == 4
    paths = RecipePaths(workdir)
    corpus = RecipeCorpus("xx", "yy", (TrainFiles(*corpus_files),), corpus_files, "given", ())
    teacher = find_teacher(paths, Path(kept["made_by"]["teacher"]))
    with pytest.raises(Exception, match="another teacher or beam"):
        distill.distilled_corpora(paths, corpus, teacher, 2)


def test_a_recipes_work_directory_names_its_model(teacher_dir, tmp_path):
    work = tmp_path / "recipe"
    shutil.copytree(teacher_dir, work / "run" / "model")
    (work / "recipe.json").write_text("{}")
    teacher = find_teacher(RecipePaths(tmp_path / "student"), work)
    assert teacher.directory == work / "run" / "model" and teacher.languages == ("xx", "yy")
    assert teacher.source == work


def _greek(path: Path, lines: int) -> Path:
    return write_lines(path, ["αβγ δεζ ηθι κλμ"] * lines)


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "--distill-from: "),
        ("languages", "translates xx->yy, but the corpus is aa->yy"),
        ("script", "its vocabulary does not cover"),
        ("vocab-size", "keeps the teacher's vocabulary"),
        ("shape", "of --set model.*, only its dropout may be given"),
    ],
)
def test_a_bad_teacher_is_one_error_line_and_nothing_is_written(
    case, message, teacher_dir, corpus_files, tmp_path, capsys
):
    work = tmp_path / "work"
    teacher, files, extra = teacher_dir, corpus_files, []
    if case == "missing":
        teacher = tmp_path / "no-such-model"
    elif case == "languages":
        files = (write_lines(tmp_path / "train.aa", read_lines(files[0])), files[1])
    elif case == "script":
        files = (_greek(tmp_path / "train.xx", 50), files[1])
        files = (files[0], write_lines(tmp_path / "train.yy", read_lines(corpus_files[1], 50)))
    elif case == "vocab-size":
        extra = ["--vocab-size", "100"]
    elif case == "shape":
        extra = ["--set", "model.overrides.d_model=64"]
    args = ["recipe", "--workdir", work, "--train", *files, "--distill-from", teacher, *extra]
    result = in_process(capsys, *args, "--minutes", "1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("translator recipe: error: ") and message in line
    assert not work.exists()


def test_a_translation_over_half_the_budget_stops_first_and_names_what_fits(
    teacher_dir, corpus_files, tmp_path, capsys, monkeypatch
):
    """A teacher timed at 2 sentences/s: 184 pairs would take 92 s of a 1-minute job."""
    from training.recipe.teacher import DecodeTiming

    slow = DecodeTiming(64.0, 128, 1000, {"student-2": 40.0, "student-1": 30.0}, 0.1)
    slow = dataclasses.replace(
        slow, student_seconds={**slow.student_seconds, "student-1-half": 20.0}
    )
    monkeypatch.setattr(distillation, "time_decoding", lambda *args: slow)
    work = tmp_path / "work"
    args = ["recipe", "--workdir", work, "--train", *corpus_files, "--distill-from", teacher_dir]
    result = in_process(capsys, *args, "--minutes", "1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "translating 184 training sources would take about 1.5 of the" in line
    fits = int(line.split("--distill-pairs ")[1].split()[0].replace(",", ""))
    assert 0 < fits < 184 and not (work / "distilled").exists()


def test_student_shapes_have_a_deep_encoder_and_a_shallow_decoder():
    teacher = TransformerConfig.preset("small", vocab_size=8000)
    candidates = student_shapes(teacher, "small")
    # The teacher's encoder at its width (they are cut from it), six blocks at half.
    encoder = teacher.num_encoder_layers
    assert [(s.encoder_layers, s.decoder_layers) for s in candidates] == [
        (encoder, 2),
        (encoder, 1),
        (6, 1),
    ]
    assert candidates[0].d_model == teacher.d_model and candidates[2].d_model < teacher.d_model
    assert [s.parameters for s in candidates] == sorted(
        (s.parameters for s in candidates), reverse=True
    )
    assert candidates[1].describe().startswith(f"student-1 ({encoder}+1 x ")


def test_students_at_the_teachers_width_are_cut_from_it():
    """A narrow teacher (4+4 x 128): its encoder and its decoder's last, or first and last."""
    teacher = TransformerConfig.preset(
        "small", vocab_size=8000, num_encoder_layers=4, num_decoder_layers=4, d_model=128,
        ffn_dim=256,
    )  # fmt: skip
    two, one, half = student_shapes(teacher, "small")
    assert (two.depth, one.depth, half.depth) == ("4+2", "4+1", "6+1")
    assert teacher_blocks(teacher, two) == (0, 3) and teacher_blocks(teacher, one) == (3,)
    assert teacher_blocks(teacher, half) == ()  # another width: random weights
    # A two-block teacher has no two-block student; its one is cut from its last block.
    shallow = dataclasses.replace(teacher, num_decoder_layers=2)
    (one, half) = student_shapes(shallow, "small")
    assert one.name == "student-1" and teacher_blocks(shallow, one) == (1,)


def test_the_largest_cut_student_fast_enough_is_chosen_else_the_fastest_cut_one():
    teacher = TransformerConfig.preset("small", vocab_size=8000)
    candidates = student_shapes(teacher, "small")
    speeds = {"student-2": 1.6, "student-1": 2.3, "student-1-half": 3.5}
    assert choose_student(teacher, candidates, speeds, 2.0).shape.name == "student-1"
    assert choose_student(teacher, candidates, speeds, 1.5).shape.name == "student-2"
    # The half-width student from random weights is faster, but taken by name only.
    slow = choose_student(teacher, candidates, speeds, 3.0)
    assert slow.shape.name == "student-1" and "no student cut from the teacher" in slow.reason
    assert "--student student-1-half takes it" in slow.reason
    # Where the fastest is a cut one, nothing else is offered.
    speeds = {"student-2": 1.2, "student-1": 1.7, "student-1-half": 1.5}
    cut = choose_student(teacher, candidates, speeds, 2.0)
    assert cut.shape.name == "student-1" and "takes it" not in cut.reason
    assert named_student(candidates, "student-2") is candidates[0]
    with pytest.raises(ValueError, match="one of student-2, student-1, student-1-half"):
        named_student(candidates, "tiny")


def test_a_plan_before_students_reads_back_with_equal_depths():
    """plan.json files written with one `layers` field still load."""
    shape = SHAPES[0]
    old = {k: v for k, v in vars(shape).items() if not k.endswith("_layers")}
    old["layers"] = 4
    assert Shape.from_dict(old) == shape
    student = Shape("student-1", "small", 6, 1, 128, 4, 256)
    assert student.model_overrides()["num_decoder_layers"] == 1
    assert student.parameters < Shape("x", "small", 6, 6, 128, 4, 256).parameters


def test_the_export_held_back_is_the_last_one_measured_on_this_machine(capsys):
    assert distillation._export_seconds() == (distillation.EXPORT_SECONDS, False)
    distillation._learn_export_seconds(41.26)
    assert distillation._export_seconds() == (41.3, True)
    kept = machine_cache_dir() / distillation.EXPORT_SECONDS_FILE
    kept.write_text("{", "utf-8")  # broken: the default, said
    assert distillation._export_seconds() == (distillation.EXPORT_SECONDS, False)
    assert f"cannot read {kept}" in capsys.readouterr().out


@pytest.mark.slow
def test_a_distilled_student_trains_evaluates_beside_its_teacher_and_exports(
    teacher_dir, corpus_files, tmp_path, capsys
):
    """The whole job within its minutes; the student reloads as any model does."""
    need_module("ctranslate2", DEV_EXTRA)
    test = write_copy_corpus(tmp_path / "test", 30, seed=12, reverse=True)
    test = (test[0].rename(tmp_path / "news.xx"), test[1].rename(tmp_path / "news.yy"))
    work = tmp_path / "work"
    args = ["recipe", "--workdir", work, "--minutes", "2.5", "--train", *corpus_files]
    args += ["--test", *test, "--distill-from", teacher_dir, "--student", "student-1"]
    args += ["--set", "eval.max_sentences=20", "--set", "model.overrides.dropout=0.05"]
    result = in_process(capsys, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((work / "distill.json").read_text())
    assert report["student"].startswith("student-1 (2+1 x 32")
    # The student's dropout is the one given, not the planner's.
    from translator.artifacts import load_model_dir

    assert load_model_dir(work / "run" / "model").model.config.dropout == 0.05
    # Cut from the teacher: its encoder and last decoder block, and trained from there.
    _assert_cut_from(work / "student-init", teacher_dir, block=1)
    run = yaml.safe_load((work / "run" / "config.yaml").read_text())
    assert run["train"]["init_from"] == str(work / "student-init")
    # The student's training gets what the stages before it and the reserve leave of the
    # budget, and its loop ends by that deadline. (The whole job's seconds, the work after
    # the last update included, are the benchmark's, bench/RESULTS.md: beside another
    # worker in CI that work alone took 45 s of this 150-s job, against 10 s held.)
    seconds = report["seconds"]
    stages = ("data", "vocabulary", "timing", "cut", "translation")  # (before training)
    before = sum(seconds[stage] for stage in stages)
    held = int(re.search(r"(\d+) s held back for evaluation and export", result.stdout)[1])
    planned = json.loads((work / "run" / "plan.json").read_text())["budget"]["seconds"]
    assert planned <= 150 - before - held + 1, (planned, seconds, held)  # (+1: rounding)
    loop = RunRecord.read(work / "run" / "model").budget_seconds
    assert loop <= 1.05 * planned, (loop, planned)
    # The export's own seconds are kept for the next job's reserve on this machine.
    assert "no export measured here yet" in result.stdout
    learned, measured = distillation._export_seconds()
    assert measured and 0 < learned <= seconds["export"], (learned, seconds)
    plan = json.loads((work / "run" / "plan.json").read_text())
    assert (plan["shape"]["encoder_layers"], plan["shape"]["decoder_layers"]) == (2, 1)
    out = result.stdout
    # The progress lines count the job's seven stages, in order.
    stages = [int(number) for number, total in re.findall(r"^\[(\d)/(\d)\] ", out, re.M)]
    assert stages == sorted(stages) and set(stages) == set(range(1, 8)), stages
    assert re.findall(r"^\[\d/(\d)\] ", out, re.M) == ["7"] * len(stages)
    assert "vs teacher:  news: BLEU " in out and "minutes:     " in out
    assert (work / "eval-teacher" / "news" / "report.json").is_file()
    student_report = json.loads((work / "eval" / "news" / "report.json").read_text())
    assert "bootstrap" in json.dumps(student_report)  # tested against the teacher's
    # The CTranslate2 export kept is the compute type that timed faster.
    speeds = report["ctranslate2_tokens_per_second"]
    assert set(speeds) == {"float32", "int8"} and min(speeds.values()) > 0
    kept = json.loads((work / "export-ct2" / "translator_ct2.json").read_text())
    assert kept["compute_type"] == max(speeds, key=speeds.__getitem__)
    info = json.loads((work / "export-ct2" / "translator.json").read_text())
    assert info["quantization"] == kept["compute_type"]
    # Reloaded: the SavedModel, in a process without the project, translates as the
    # student's model directory did in its report.
    sentences = read_lines(test[0])[:8]
    reloaded = run_saved_model_reference(work / "export" / "1", sentences)
    hypotheses = read_lines(work / "eval" / "news" / "translations.yy")[:8]
    assert reloaded["batch"]["translations"] == hypotheses


@pytest.mark.slow
def test_on_jax_the_teacher_translates_as_on_tensorflow_and_its_cut_student_trains(
    uninterrupted, teacher_dir, corpus_files, tmp_path
):
    """The job on JAX: the distilled corpus is line for line the one TensorFlow made, and
    the student, cut from the teacher, trains on JAX from there and is evaluated beside it."""
    from tests.support.cli import translator

    test = write_copy_corpus(tmp_path / "test", 20, seed=12, reverse=True)
    test = (test[0].rename(tmp_path / "news.xx"), test[1].rename(tmp_path / "news.yy"))
    work = tmp_path / "work"
    # (Minutes for JAX's compiling on a loaded 2-core CPU: its timing alone took 57 s.)
    args = ["recipe", "--workdir", work, "--minutes", "3", "--train", *corpus_files]
    args += ["--test", *test, "--distill-from", teacher_dir, "--student", "student-1"]
    args += ["--set", "train.backend=jax", "--set", "eval.max_sentences=20"]
    # (Batches the 184 training pairs fill under the static shapes JAX compiles for.)
    args += ["--set", "data.pipeline.batch_tokens=256"]
    done = translator(*args, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    # TF == JAX: the teacher's beam output, searched by the JAX decoder, for the pairs the
    # job kept for training (the rest validate it).
    record = json.loads((work / "distilled" / "train.yy.json").read_text())["made_by"]
    sources, ours = read_lines(record["source"]), read_lines(work / "distilled" / "train.yy.gz")
    by_tensorflow = dict(
        zip(read_lines(corpus_files[0]), read_lines(uninterrupted.files.target), strict=True)
    )
    assert len(ours) == len(sources) > 150
    assert ours == [by_tensorflow[line] for line in sources] and len(set(ours)) > 40
    _assert_cut_from(work / "student-init", teacher_dir, block=1)
    plan = json.loads((work / "run" / "plan.json").read_text())
    assert (plan["shape"]["encoder_layers"], plan["shape"]["decoder_layers"]) == (2, 1)
    # A student's dropout: the epochs rule's, at most the students' cap.
    (dropout,) = [c for c in plan["choices"] if c["key"] == "model.overrides.dropout"]
    assert dropout["value"] <= 0.1 and "a student, at most 0.1" in dropout["reason"], dropout
    assert sorted((work / "run" / "checkpoints").glob("ckpt-*.npz"))  # the JAX loop's
    assert "vs teacher:  news: BLEU " in done.stdout
    assert (work / "eval" / "news" / "report.json").is_file()
    # Both exports from the JAX model: the SavedModel and CTranslate2's (timed on JAX).
    assert (work / "export" / "1" / "saved_model.pb").is_file()
    assert (work / "export-ct2" / "translator.json").is_file()


def _assert_cut_from(student_dir: Path, teacher_dir: Path, block: int) -> None:
    """The student's weights are the teacher's, its one decoder block the teacher's `block`."""
    import numpy as np

    from translator.artifacts import load_model_dir

    student, teacher = (load_model_dir(d).model for d in (student_dir, teacher_dir))
    assert student.config.num_decoder_layers == 1
    pairs = [(student.decoder_blocks[0], teacher.decoder_blocks[block])]
    pairs += list(zip(student.encoder_blocks, teacher.encoder_blocks, strict=True))
    pairs += [(student.source_embedding, teacher.source_embedding)]
    for ours, theirs in pairs:
        for mine, original in zip(ours.weights, theirs.weights, strict=True):
            np.testing.assert_array_equal(np.asarray(mine), np.asarray(original))


def test_a_cut_is_kept_for_a_resumed_job_and_made_again_for_another_student(teacher_dir, tmp_path):
    from training.planning.students import StudentChoice

    paths = RecipePaths(tmp_path)
    teacher = find_teacher(paths, teacher_dir)
    one, half = student_shapes(teacher.config, "tiny")
    out = distillation._cut_student(paths, teacher, StudentChoice(one, {}, ""))
    weights, record = out / "model.keras", out / "metadata.json"
    made = weights.stat().st_mtime_ns
    assert distillation._cut_student(paths, teacher, StudentChoice(one, {}, "")) == out
    assert weights.stat().st_mtime_ns == made  # kept
    # A cut of other blocks (an earlier --student) is made again.
    other = json.loads(record.read_text())
    other["cut_from"]["decoder_blocks"] = [0]
    record.write_text(json.dumps(other))
    distillation._cut_student(paths, teacher, StudentChoice(one, {}, ""))
    assert json.loads(record.read_text())["cut_from"]["decoder_blocks"] == [1]
    _assert_cut_from(out, teacher_dir, block=1)
    # The half-width student starts from random weights: nothing is cut.
    assert distillation._cut_student(paths, teacher, StudentChoice(half, {}, "")) is None
