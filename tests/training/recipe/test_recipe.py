"""`translator recipe` on a user's corpus: languages, the held-out slice, errors, end to end."""

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support.cli import NOISE, in_process, translator
from tests.support.corpora import read_gz_lines, write_copy_corpus, write_lines
from tests.support.images import assert_png
from tests.support.missing import need_multi30k
from training.config import DATA_PREPARED, DEFAULT_CONFIG, read_config
from training.recipe.cli import settings_files
from training.recipe.corpus import RecipeCorpus, held_out_size, hold_out, languages, prepare_data
from training.recipe.run_config import run_request
from training.recipe.settings import RecipePaths, RecipeSettings, TrainFiles
from training.recipe.vocab import build_vocab
from translator.cli import build_parser
from translator.errors import ConfigError
from translator.languages import language_of


def lines(path: Path) -> list[str]:
    if path.suffix == ".gz":
        return read_gz_lines(path)
    return path.read_text("utf-8").splitlines()


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("train.fr.gz", "fr"),
        ("corpus.de", "de"),
        ("news.pt_BR", "pt_BR"),
        ("x.zh-Hans.gz", "zh-Hans"),
        ("train.src", "src"),  # three letters pass as a code: --langs overrides it
        ("corpus", None),
        ("corpus.txt.gz", "txt"),
        ("data.1234", None),
    ],
)
def test_the_language_comes_from_the_file_suffix(name, code):
    assert language_of(Path(name)) == code


def test_languages_from_langs_suffixes_or_the_multi30k_pair():
    train = (TrainFiles(Path("a.fr.gz"), Path("a.en.gz")),)
    assert languages(RecipeSettings(1, None, None, train=train)) == ("fr", "en")
    assert languages(RecipeSettings(1, None, None, train=train, langs="de-en")) == ("de", "en")
    assert languages(RecipeSettings(1, None, None, pair="de-en")) == ("de", "en")
    nameless = (TrainFiles(Path("source"), Path("target")),)
    with pytest.raises(ConfigError, match="give --langs SRC-TGT"):
        languages(RecipeSettings(1, None, None, train=nameless))
    with pytest.raises(ConfigError, match="both 'en'"):
        languages(RecipeSettings(1, None, None, train=nameless, langs="en-en"))
    with pytest.raises(ConfigError, match="expected SRC-TGT"):
        languages(RecipeSettings(1, None, None, train=nameless, langs="english"))


def test_the_held_out_slice_is_seeded_disjoint_complete_and_never_trained_on(tmp_path):
    source, target = write_copy_corpus(tmp_path / "corpus", 3000, seed=7, reverse=True)
    pairs = list(zip(lines(source), lines(target), strict=True))
    train, valid, count = hold_out(tmp_path / "a", (source, target), 3000, ("xx", "yy"))
    assert count == held_out_size(3000) == 200
    train_pairs = list(zip(lines(train[0]), lines(train[1]), strict=True))
    valid_pairs = list(zip(lines(valid[0]), lines(valid[1]), strict=True))
    assert len(valid_pairs) == 200 and len(train_pairs) == 2800
    assert sorted(train_pairs + valid_pairs) == sorted(pairs)  # every pair, once, aligned
    # In corpus order (each split a subsequence of the corpus), the same slice again.
    for split in (train_pairs, valid_pairs):
        rest = iter(pairs)
        assert all(pair in rest for pair in split)
    again = hold_out(tmp_path / "b", (source, target), 3000, ("xx", "yy"))
    assert lines(again[1][0]) == lines(valid[0])


def test_held_out_sizes_stay_between_a_tiny_corpus_and_a_thousand():
    assert held_out_size(50) == 10 and held_out_size(3000) == 200
    assert held_out_size(29_000) == 1000 and held_out_size(10**7) == 1000
    assert held_out_size(1) == 1


def test_a_workdir_of_another_corpus_is_refused(tmp_path):
    first = write_copy_corpus(tmp_path / "c1", 300, seed=1)
    other = write_copy_corpus(tmp_path / "c2", 300, seed=2)
    paths = RecipePaths(tmp_path / "work")
    prepare_data(paths, RecipeSettings(1, None, None, train=(TrainFiles(*first),), langs="xx-yy"))
    with pytest.raises(ConfigError, match="holds a recipe of other inputs"):
        settings = RecipeSettings(1, None, None, train=(TrainFiles(*other),), langs="xx-yy")
        prepare_data(paths, settings)


def recipe_args(*args):
    return build_parser().parse_args(["recipe", *map(str, args)])


def test_train_weight_and_tag_apply_to_the_files_before_them():
    args = recipe_args(
        *("--train", "a.en", "a.de", "--tag", "<2de>", "--weight", "2"),
        *("--train", "b.de", "b.en", "--tag", "<2en>"),
        *("--valid", "v.de", "v.en", "--tag", "<2en>", "--test", "t.en", "t.de"),
    )
    files = settings_files(args)
    assert files["train"] == (
        TrainFiles(Path("a.en"), Path("a.de"), 2.0, "<2de>"),
        TrainFiles(Path("b.de"), Path("b.en"), 1.0, "<2en>"),
    )
    assert files["valid"] == (Path("v.de"), Path("v.en")) and files["valid_tag"] == "<2en>"
    assert [(t.source, t.tag) for t in files["tests"]] == [(Path("t.en"), "")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--weight", "2", "--train", "a", "b"], "--weight 2.0: give it after the --train"),
        (["--train", "a", "b", "--test", "c", "d", "--weight", "2"], "after the --train it"),
        (["--train", "a", "b", "--tag", "<x>", "--tag", "<y>"], "--tag: --train a b has one"),
        (["--train", "a", "b", "--weight", "0"], "--weight 0: must be > 0"),
        (["--train", "a", "b", "--valid", "c", "d", "--valid", "e", "f"], "one validation"),
    ],
)
def test_a_misplaced_weight_or_tag_is_one_error_line(args, message, capsys):
    with pytest.raises(SystemExit):
        recipe_args(*args)
    assert message in capsys.readouterr().err


def test_several_tagged_corpora_become_the_configs_weighted_list(tmp_path):
    """Stages 1 and 2 and the training config of a bidirectional two-corpus recipe."""
    forward = write_copy_corpus(tmp_path / "f", 400, seed=11)
    backward = write_copy_corpus(tmp_path / "b", 100, seed=12, reverse=True)
    args = recipe_args(
        *("--workdir", tmp_path / "work", "--langs", "xx-yy", "--minutes", "2"),
        *("--train", *forward, "--tag", "<2yy>", "--weight", "3"),
        *("--train", *backward, "--tag", "<2xx>"),
    )
    settings = RecipeSettings(2, None, None, langs="xx-yy", **settings_files(args))
    paths = RecipePaths(tmp_path / "work")
    corpus = prepare_data(paths, settings)
    # The validation slice comes out of the first corpus only, and is tagged as it is.
    assert corpus.valid_tag == "<2yy>" and corpus.tags == ("<2yy>", "<2xx>")
    held = lines(corpus.valid[0])
    assert len(held) == held_out_size(400) and set(held) <= set(lines(forward[0]))
    assert corpus.train[0].source == paths.data / "train.xx" and corpus.train[1].files == backward
    build_vocab(paths, settings, corpus)
    from translator.pipelines.vocabulary import load_vocabulary

    vocabulary = load_vocabulary(paths.vocabulary)
    assert vocabulary.metadata.tags == ("<2yy>", "<2xx>")
    config, _ = run_request(paths, settings, corpus)
    got = [(c.source, c.weight, c.tag) for c in config.data.corpora()]
    assert got == [
        (str(paths.data / "train.xx"), 3.0, "<2yy>"),
        (str(backward[0]), 1.0, "<2xx>"),
    ]
    assert config.data.valid_tag == "<2yy>" and config.data.train_source == ""
    from training.run_dir import check_inputs

    check_inputs(config)  # every file found, every tag one piece of the vocabulary


def test_on_jax_the_recipe_trains_from_its_corpus_prepared_once(tmp_path, capsys):
    from training.planning.measure import count_corpus
    from training.recipe.prepared import prepared_corpus
    from training.run_dir import check_inputs
    from translator.pipelines.vocabulary import load_vocabulary

    files = write_copy_corpus(tmp_path / "c", 400, seed=13)
    args = recipe_args("--workdir", tmp_path / "work", "--langs", "xx-yy", "--train", *files)
    settings = RecipeSettings(2, None, None, langs="xx-yy", **settings_files(args))
    paths = RecipePaths(tmp_path / "work")
    corpus = prepare_data(paths, settings)
    build_vocab(paths, settings, corpus)
    assert prepared_corpus(paths, settings, corpus, "tensorflow") is None  # tf.data reads text
    prepared = prepared_corpus(paths, settings, corpus, "jax")
    assert prepared == paths.workdir / "prepared"
    assert "preparing the corpus once" in capsys.readouterr().out
    written = (prepared / "manifest.json").stat().st_mtime_ns
    assert prepared_corpus(paths, settings, corpus, "jax") == prepared  # a rerun: kept
    assert "(prepared before)" in capsys.readouterr().out
    assert (prepared / "manifest.json").stat().st_mtime_ns == written
    config, request = run_request(paths, settings, corpus, prepared)
    assert config.data.prepared == str(prepared) and config.data.corpora() == ()
    assert DATA_PREPARED in request.set_keys
    check_inputs(config)
    text, _ = run_request(paths, settings, corpus)
    vocabulary = load_vocabulary(paths.vocabulary)
    # The plan's counts, its pairs per bucket included (an epoch's batches are counted by them).
    assert count_corpus(config, vocabulary) == count_corpus(text, vocabulary)
    # Other length limits (a user's --set) make it again; a mix of corpora reads text.
    longer = RecipeSettings(
        2, None, None, config=read_config(DEFAULT_CONFIG, ["data.pipeline.max_source_length=64"]),
        langs="xx-yy",
        **settings_files(args),
    )  # fmt: skip
    assert prepared_corpus(paths, longer, corpus, "jax") == prepared
    assert "preparing the corpus once" in capsys.readouterr().out
    mix = dataclasses.replace(corpus, train=(*corpus.train, *corpus.train))
    assert prepared_corpus(paths, settings, mix, "jax") is None
    assert "a mix of corpora is not prepared" in capsys.readouterr().out
    # The same files moved (a work directory carried to another machine): still kept;
    # a file of the same name with other text is prepared again.
    (trained,) = corpus.train  # (the corpus less its held-out slice)
    moved = tmp_path / "moved"
    shutil.copytree(trained.source.parent, moved)
    elsewhere = TrainFiles(moved / trained.source.name, moved / trained.target.name)
    corpus = dataclasses.replace(corpus, train=(elsewhere,))
    assert prepared_corpus(paths, longer, corpus, "jax") == prepared
    assert "(prepared before)" in capsys.readouterr().out
    target = moved / trained.target.name
    target.write_text("changed\n" * len(lines(target)), "utf-8")
    assert prepared_corpus(paths, longer, corpus, "jax") == prepared
    assert "preparing the corpus once" in capsys.readouterr().out


def test_recipe_clean_trains_on_the_cleaned_corpus_and_cleans_it_once(tmp_path, capsys):
    """`recipe --clean`: stage 1 cleans each corpus, holds validation out of what it kept."""
    directory = need_multi30k()
    english = read_gz_lines(directory / "val.en.gz", 300)
    german = read_gz_lines(directory / "val.de.gz", 300)
    # 300 clean pairs, 40 copies of the source, 30 repeats and 10 with an empty side.
    sources = english + english[:40] + english[:30] + english[:10]
    targets = german + english[:40] + german[:30] + [""] * 10
    files = (write_lines(tmp_path / "web.en", sources), write_lines(tmp_path / "web.de", targets))
    args = recipe_args("--workdir", tmp_path / "work", "--train", *files, "--clean")
    settings = RecipeSettings(1, None, None, clean=args.clean, **settings_files(args))
    paths = RecipePaths(tmp_path / "work")
    corpus = prepare_data(paths, settings)
    printed = capsys.readouterr().out
    report = json.loads((paths.data / "clean-1.json").read_text())["report"]
    removed = report["removed"]
    assert removed["empty"] == 10 and removed["copy"] == 40 and removed["duplicate"] == 30
    assert report["kept"] == 300 - sum(
        n for rule, n in removed.items() if rule not in ("empty", "copy", "duplicate")
    )
    assert f"{report['kept']:,}" in printed and "language check: en/de" in printed

    # Training and the held-out validation slice come from the cleaned pairs only.
    def pairs(source: Path, target: Path) -> set[tuple[str, str]]:
        return set(zip(lines(source), lines(target), strict=True))

    kept = pairs(paths.data / "clean-1.en.gz", paths.data / "clean-1.de.gz")
    trained = pairs(corpus.train[0].source, corpus.train[0].target)
    held = pairs(*corpus.valid)
    assert trained | held == kept and not trained & held and len(held) == held_out_size(len(kept))
    # A second run of the stage cleans nothing again.
    again = prepare_data(paths, settings)
    assert "(done before)" in capsys.readouterr().out and again == corpus


def test_bad_corpus_files_are_one_error_line_naming_the_file(tmp_path, capsys):
    source = tmp_path / "train.fr"
    target = tmp_path / "train.en"
    source.write_text("un\ndeux\ntrois\n")
    target.write_text("one\ntwo\n")
    result = in_process(
        capsys, "recipe", "--workdir", tmp_path / "w", "--train", source, target, "--minutes", "1"
    )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("translator recipe: error: ") and str(source) in last
    assert "3 lines" in last and "Traceback" not in result.stderr
    target.write_bytes(b"one\ntwo\n\xff\xfe\n")
    result = in_process(
        capsys, "recipe", "--workdir", tmp_path / "w2", "--train", source, target, "--minutes", "1"
    )
    assert result.returncode == 2 and "line 3" in result.stderr.strip().splitlines()[-1]
    result = in_process(capsys, "recipe", "--workdir", tmp_path / "w3", "--test", source, target)
    assert result.returncode == 2 and "need --train" in result.stderr
    source.write_text("")
    target.write_text("")
    result = in_process(capsys, "recipe", "--workdir", tmp_path / "w4", "--train", source, target)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith(f"{target}: no sentence pairs")


def test_a_short_bidirectional_recipe_runs_every_stage_then_skips_them(tmp_path, capsys):
    """One vocabulary, one model, both directions, each test set translated with its tag,
    in a few seconds of training (the slow test below trains a user's corpus for real)."""
    forward = write_copy_corpus(tmp_path / "f", 300, seed=5)
    test = write_copy_corpus(tmp_path / "t", 20, seed=6)
    work = tmp_path / "work"
    args = ["recipe", "--workdir", work, "--minutes", "0.2", "--langs", "xx-yy"]
    args += ["--train", *forward, "--tag", "<2yy>", "--train", *reversed(forward), "--tag", "<2xx>"]
    args += ["--test", *test, "--tag", "<2yy>", "--test", *reversed(test), "--tag", "<2xx>"]
    args += ["--test-sentences", "5", "--beam-size", "2"]
    args += ["--set", "model.preset=tiny", "--set", "eval.max_sentences=10"]
    result = translator(*args, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for stage in range(1, 6):
        assert f"[{stage}/5] " in out, stage
    assert "tags <2yy>, <2xx>" in out and "(tag <2xx>)" in out and "trained:     " in out
    plan = json.loads((work / "run" / "plan.json").read_text())
    assert plan["budget"]["seconds"] <= 12  # measuring counted inside the budget
    reports = sorted(path.parent.name for path in (work / "eval").glob("*/report.json"))
    records = [json.loads((work / "eval" / r / "report.json").read_text()) for r in reports]
    assert {record["search"]["tag"] for record in records} == {"<2yy>", "<2xx>"}
    assert [record["sentences"] for record in records] == [5, 5]
    metadata = json.loads((work / "export" / "1" / "assets.extra" / "translator.json").read_text())
    assert metadata["tags"] == ["<2yy>", "<2xx>"] and metadata["tag"] == "<2yy>"
    assert "tagged" in metadata["signatures"]
    assert not NOISE.search(result.stderr)
    again = in_process(capsys, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already trained" in again.stdout and "already exported" in again.stdout


@pytest.mark.slow
def test_recipe_on_a_users_corpus_end_to_end(tmp_path, capsys):
    """The whole recipe on a corpus of another 'language pair', within a budget."""
    source, target = write_copy_corpus(tmp_path / "corpus", 2000, seed=3, reverse=True)
    train = (source.rename(tmp_path / "train.xx"), target.rename(tmp_path / "train.yy"))
    test = write_copy_corpus(tmp_path / "test", 100, seed=4, reverse=True)
    test = (test[0].rename(tmp_path / "news.xx"), test[1].rename(tmp_path / "news.yy"))
    work = tmp_path / "work"
    args = ["recipe", "--workdir", work, "--minutes", "0.75", "--train", *train]
    args += ["--test", *test, "--set", "model.preset=tiny", "--set", "eval.max_sentences=50"]
    result = translator(*args, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "languages:   xx -> yy" in out
    assert "validation:  200 of the 2,000 training pairs, held out" in out
    plan = json.loads((work / "run" / "plan.json").read_text())
    assert plan["budget"]["seconds"] < 45  # measuring counted inside the budget
    assert (work / "speed.json").is_file()
    assert "plan:        " in out and "trained:     " in out and "validation BLEU" in out
    assert f"curves:      {work / 'run' / 'curves.png'}  (" in out
    assert_png(work / "run" / "curves.png", min_bytes=20_000, min_size=600)
    report = json.loads((work / "eval" / "news" / "report.json").read_text())
    assert report["sentences"] == 100
    assert (work / "eval" / "news" / "translations.yy").is_file()
    assert (work / "export" / "1" / "saved_model.pb").is_file()
    assert not NOISE.search(result.stderr)
    # Again (in this process): every stage is done and skipped.
    again = in_process(capsys, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already trained" in again.stdout and "already exported" in again.stdout


def test_multi30k_is_one_untagged_corpus_given_as_the_configs_pair(multi30k_dir, tmp_path):
    """The README's first command: stage 1 on the mirror, and the training config."""
    settings = RecipeSettings(1, str(multi30k_dir), None, pair="de-en")
    paths = RecipePaths(tmp_path / "work")
    corpus = prepare_data(paths, settings)
    (train,) = corpus.train
    assert train.files == (paths.data / "train.de.gz", paths.data / "train.en.gz")
    assert corpus.tags == () and corpus.valid_tag == ""
    assert [test.name for test in corpus.reports] == ["test_2016_flickr"]
    config, _ = run_request(paths, settings, corpus)
    assert config.data.train_source == str(train.source) and config.data.train == ()


def _in_script(path: Path, lang: str) -> Path:
    """A copy-task file rewritten in a CJK script: each two-letter word one character,
    written without spaces (Chinese, Japanese kanji) as those languages are."""
    start = {"zh": 0x4E00, "ja": 0x5B00}[lang]
    words = sorted({w for line in path.read_text().splitlines() for w in line.split()})
    character = {word: chr(start + i) for i, word in enumerate(words)}
    lines = [
        "".join(character[w] for w in line.split()) + "。" for line in path.read_text().splitlines()
    ]
    out = path.with_name(f"{path.stem}.{lang}")
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("cjk, side", [("zh", "target"), ("ja", "source")])
def test_a_recipe_with_a_cjk_side_scores_and_buckets_it_as_that_language(tmp_path, cjk, side):
    """en->zh and ja->en: BLEU tokenized for the target as sacreBLEU's -l does, and source
    lengths counted in characters for a source written without spaces."""
    pairs = {}
    for name, count, seed in (("train", 300, 5), ("test", 30, 6)):
        latin, copied = write_copy_corpus(tmp_path / name, count, seed)
        script = _in_script(copied, cjk)
        script = script.rename(script.with_name(f"{name}.{cjk}"))
        latin = latin.rename(latin.with_name(f"{name}.en"))
        pairs[name] = (latin, script) if side == "target" else (script, latin)
    langs = f"en-{cjk}" if side == "target" else f"{cjk}-en"
    work = tmp_path / "work"
    args = ["recipe", "--workdir", work, "--minutes", "0.2", "--train", *pairs["train"]]
    args += ["--test", *pairs["test"], "--beam-size", "2"]
    args += ["--set", "model.preset=tiny", "--set", "eval.max_sentences=10"]
    result = translator(*args, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"languages:   {langs.replace('-', ' -> ')}" in result.stdout
    report = json.loads((work / "eval" / "test" / "report.json").read_text())
    tokenizer = {"zh": "zh", "ja": "ja-mecab"}[cjk] if side == "target" else "13a"
    assert f"|tok:{tokenizer}" in report["scores"]["bleu"]["signature"]
    assert ("asian:yes" in report["scores"]["ter"]["signature"]) == (side == "target")
    assert report["length"]["tokenizer"].startswith(tokenizer)
    # The run recorded its target language: validation scored it the same way.
    config = yaml.safe_load((work / "run" / "config.yaml").read_text())
    assert config["data"]["target_lang"] == langs.split("-")[1]
    # Sources of 3 to 8 words (or characters, and a full stop): never all in "1-5", as
    # whitespace would have put every unspaced source.
    buckets = report["by_source_length"]["buckets"]
    assert {b["label"] for b in buckets} == {"1-5", "6-10"}
    # `evaluate` without -l scores in the language the model's run recorded.
    again = translator(
        "evaluate", "--model", work / "run", "--src", pairs["test"][0], "--ref", pairs["test"][1]
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"|tok:{tokenizer}" in again.stdout


@pytest.mark.slow
def test_on_jax_without_tensorflow_the_whole_recipe_runs_and_only_the_export_waits(tmp_path):
    """The recipe on JAX in a process where importing TensorFlow raises (a JAX-only GPU
    machine), from its corpus prepared once where TensorFlow is: it trains (checkpoints,
    TensorBoard events with the validation loss and BLEU, curves.png), writes the test
    report, and skips only the SavedModel, with one line saying how to export it; a rerun
    keeps every stage."""
    import subprocess
    import sys

    from tests.support.paths import REPO
    from training.recipe.prepared import prepared_corpus
    from training.summaries import read_scalars

    files = write_copy_corpus(tmp_path / "c", 400, seed=13)
    test = write_copy_corpus(tmp_path / "t", 20, seed=6)
    work = tmp_path / "work"
    sets = ("model.preset=tiny", "train.backend=jax", "train.log_every_steps=10")
    argv = ["--workdir", work, "--minutes", "0.2", "--langs", "xx-yy", "--train", *files]
    argv += ["--test", *test, "--beam-size", "2", *(f"--set={value}" for value in sets)]
    args = recipe_args(*argv)
    settings = RecipeSettings(
        0.2,
        None,
        None,
        config=read_config(DEFAULT_CONFIG, sets),
        langs="xx-yy",
        **settings_files(args),
    )
    paths = RecipePaths(work)
    corpus = prepare_data(paths, settings)
    build_vocab(paths, settings, corpus)
    assert prepared_corpus(paths, settings, corpus, "jax") == work / "prepared"

    def recipe() -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "tests.support.no_tensorflow", "translator", "recipe"]
        return subprocess.run(
            [*command, *map(str, argv)], cwd=REPO, capture_output=True, text=True, timeout=900
        )

    done = recipe()
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "(prepared before)" in out and "trained:     " in out
    # The vocabulary the corpus was prepared on stays: no TensorFlow to prepare another.
    assert "by the budget: kept (the corpus is prepared on it" in out
    skipped = [line for line in out.splitlines() if "skipped: a SavedModel" in line]
    assert len(skipped) == 1 and f"translator export --model {work / 'run'}" in skipped[0]
    assert "export:      not written here" in out and not (work / "export").exists()
    assert sorted((work / "run" / "checkpoints").glob("ckpt-*.npz"))
    scalars = read_scalars(work / "run" / "logs")
    assert scalars["train"]["loss"] and scalars["train"]["learning_rate"]
    assert scalars["validation"]["loss"] and scalars["validation"]["bleu"]
    assert_png(work / "run" / "curves.png")
    (report_file,) = (work / "eval").glob("*/report.json")
    report = json.loads(report_file.read_text())
    assert report["sentences"] == 20 and report["search"]["beam_size"] == 2
    again = recipe()
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already trained" in again.stdout and "skipped: a SavedModel" in again.stdout
    # Without its prepared corpus, one line says where to prepare it.
    shutil.rmtree(work / "prepared")
    shutil.rmtree(work / "run")
    unprepared = recipe()
    errors = [line for line in unprepared.stderr.splitlines() if "error:" in line]
    assert unprepared.returncode == 2 and len(errors) == 1, unprepared.stderr[-2000:]
    assert "TensorFlow is not installed here; run this recipe" in errors[0]


def built_workdir(tmp_path: Path, seed: int) -> tuple[RecipeSettings, RecipePaths, RecipeCorpus]:
    """A recipe's work directory on a 400-pair copy corpus, its vocabulary built (stage 2)."""
    files = write_copy_corpus(tmp_path / "c", 400, seed=seed)
    args = recipe_args("--workdir", tmp_path / "work", "--langs", "xx-yy", "--train", *files)
    settings = RecipeSettings(2, None, None, langs="xx-yy", **settings_files(args))
    paths = RecipePaths(tmp_path / "work")
    corpus = prepare_data(paths, settings)
    build_vocab(paths, settings, corpus)
    return settings, paths, corpus


def test_the_budget_rebuilds_a_smaller_vocabulary_once_and_training_plans_on_it(tmp_path, capsys):
    """Stage 2's second half: where the plan on the data limit's vocabulary takes a
    smaller size, the vocabulary is built again at it (tags kept), the choice recorded,
    and training's plan keeps it and charges the timing already spent."""
    from types import SimpleNamespace

    from training.planning.rules import SHAPES, Speed
    from training.planning.speed_cache import SpeedCache
    from training.planning.vocabulary import VocabularyChoice
    from training.recipe.vocab import BUDGET_FILE, size_by_budget
    from translator.pipelines.vocabulary import load_vocabulary

    settings, paths, corpus = built_workdir(tmp_path, seed=14)
    built = load_vocabulary(paths.vocabulary)
    plans = []

    shape = SHAPES[0]

    def plan_on(size: int):
        def made():
            plans.append(size)
            choice = VocabularyChoice(size, f"the compute limit: {size}", speedup=1.25)
            return SimpleNamespace(vocabulary=choice, measuring_seconds=12.5, shape=shape)

        return made

    # What the plan on the data limit's size timed: its shape at two batches, and in
    # turn at a smaller size; another shape.
    timed = SpeedCache(paths.workdir / "speed.json", {"vocabulary_sizes": [61, 61]})
    for batch in (1024, 2048):
        timed.put(shape, batch, Speed(1000.0 + batch, 900.0, batch, measured=True))
    timed.put(shape, 1024, Speed(3000.0, 900.0, 1024, measured=True), output=30)
    timed.put(SHAPES[1], 2048, Speed(500.0, 900.0, 2048, measured=True))

    # Where it cannot change (no TensorFlow to prepare the corpus again), a run does not
    # weigh it; a preview does, and says how to build the size it would take.
    size_by_budget(paths, settings, corpus, plan_on(10), fixed_by="no TensorFlow")
    assert not plans and not (paths.vocabulary / BUDGET_FILE).exists()
    assert "kept (no TensorFlow); --plan says what it would take" in capsys.readouterr().out
    size_by_budget(paths, settings, corpus, plan_on(10), fixed_by="no TensorFlow", preview=True)
    said = "a run here: 10 pieces (the compute limit: 10); no TensorFlow: to train at that size, "
    said += "run this recipe with --vocab-size 10 --plan where TensorFlow is"
    assert plans == [10] and said in capsys.readouterr().out
    assert load_vocabulary(paths.vocabulary).target_sha256 == built.target_sha256
    size_by_budget(paths, settings, corpus, plan_on(built.target_vocab_size), "no TF", preview=True)
    assert "a run here: kept (the compute limit: " in capsys.readouterr().out
    assert not (paths.vocabulary / BUDGET_FILE).exists()
    plans.clear()
    # A preview (`--plan`) asks, and changes nothing: the run may be on another machine.
    size_by_budget(paths, settings, corpus, plan_on(built.target_vocab_size - 5), preview=True)
    assert plans == [built.target_vocab_size - 5] and not (paths.vocabulary / BUDGET_FILE).exists()
    assert load_vocabulary(paths.vocabulary).target_sha256 == built.target_sha256
    plans.clear()
    # The control: a plan that keeps the size rebuilds nothing.
    size_by_budget(paths, settings, corpus, plan_on(built.target_vocab_size))
    assert load_vocabulary(paths.vocabulary).target_sha256 == built.target_sha256
    (paths.vocabulary / BUDGET_FILE).unlink()

    smaller = built.target_vocab_size - 10
    size_by_budget(paths, settings, corpus, plan_on(smaller))
    rebuilt = load_vocabulary(paths.vocabulary)
    assert rebuilt.target_vocab_size == smaller and rebuilt.metadata.tags == built.metadata.tags
    _, request = run_request(paths, settings, corpus)
    reason = f"sized by the budget before training: the compute limit: {smaller}"
    assert request.vocabulary == reason
    assert request.measured_seconds == 12.5
    # Training's plan, on the new vocabulary, gets the chosen shape's speeds at the new
    # size from those timings (the plan's speedup), not a third timing.
    assert dict(request.known_speeds) == {
        SpeedCache.key(shape, batch): Speed(1.25 * (1000.0 + batch), 900.0, batch, measured=True)
        for batch in (1024, 2048)
    }
    size_by_budget(paths, settings, corpus, plan_on(smaller - 10))  # decided: not again
    assert plans == [built.target_vocab_size, smaller]
    assert load_vocabulary(paths.vocabulary).target_vocab_size == smaller
    # A size the user gave is theirs: never weighed.
    given = dataclasses.replace(settings, vocab_size=built.target_vocab_size)
    assert run_request(paths, given, corpus)[1].vocabulary == "--vocab-size"


def test_a_given_vocab_size_builds_that_size_or_says_why_it_cannot(tmp_path, monkeypatch, capsys):
    """`--vocab-size` on a work directory whose vocabulary has another size: built again
    at the size given while nothing has planned on it yet; refused in one line naming
    the work directory once a run has, and where the corpus prepared on it cannot be
    prepared again (no TensorFlow). The same size keeps what is built; fine-tuning keeps
    its model's, so the two are one error line."""
    import training.recipe.vocab as vocab_stage
    from training.planning.measure import PLAN_FILE
    from translator.pipelines.vocabulary import load_vocabulary

    settings, paths, corpus = built_workdir(tmp_path, seed=15)
    built = load_vocabulary(paths.vocabulary)
    smaller = built.target_vocab_size - 8
    given = dataclasses.replace(settings, vocab_size=smaller)

    build_vocab(paths, given, corpus)
    assert load_vocabulary(paths.vocabulary).target_vocab_size == smaller
    same = load_vocabulary(paths.vocabulary).target_sha256
    build_vocab(paths, given, corpus)  # the size it holds: kept
    assert load_vocabulary(paths.vocabulary).target_sha256 == same

    again = dataclasses.replace(settings, vocab_size=smaller - 4)
    monkeypatch.setattr(vocab_stage, "fixed_vocabulary", lambda: "no TensorFlow")
    held = f"--vocab-size {smaller - 4:,}: {paths.vocabulary} holds {smaller:,} pieces"
    with pytest.raises(ConfigError, match=re.escape(f"{held}, and no TensorFlow")):
        build_vocab(paths, again, corpus)
    monkeypatch.undo()
    paths.run.mkdir(parents=True)
    (paths.run / PLAN_FILE).write_text("{}")
    planned = f"{held}, and the run in {paths.run} planned on them; use a new work directory"
    with pytest.raises(ConfigError, match=re.escape(planned)):
        build_vocab(paths, again, corpus)
    assert load_vocabulary(paths.vocabulary).target_sha256 == same
    refused = in_process(
        capsys,
        "recipe",
        "--workdir",
        tmp_path / "w",
        "--vocab-size",
        "100",
        "--init-from",
        tmp_path / "model",
    )
    errors = [line for line in refused.stderr.splitlines() if "error:" in line]
    assert refused.returncode == 2 and errors == [
        "translator recipe: error: --init-from: fine-tuning keeps the model's vocabulary; "
        "leave out --vocab-size"
    ]
