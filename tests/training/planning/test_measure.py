"""Planning a real run: what the user set is kept, the rest planned, saved and resumed;
speeds measured on the real pipeline and cached."""

import dataclasses
import json
import re

import pytest
import yaml

from tests.support.cli import NOISE, in_process, translator
from tests.support.runs import tiny_raw_config
from training.config import ConfigKey, explicit_keys, read_config
from training.planning.rules import Plan


def test_explicit_keys_are_what_the_file_and_the_overrides_set(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  preset: tiny\n  overrides: {dropout: 0.2}\ntrain:\n  seed: 3\n")
    keys = explicit_keys(path, ["optimizer.peak_learning_rate=0.001", "model.overrides={}"])
    wanted = ("model.preset", "model.overrides", "train.seed", "optimizer.peak_learning_rate")
    assert keys == {ConfigKey.of(name) for name in wanted}
    assert ConfigKey.of("model.overrides.dropout") in explicit_keys(path)
    given = read_config(path, ["optimizer.peak_learning_rate=0.001"])
    assert given.set_keys == {ConfigKey.of("optimizer.peak_learning_rate")} < given.keys
    assert given.config.optimizer.peak_learning_rate == 0.001 and given.config.train.seed == 3


def write_user_config(tmp_path, task, **train):
    """What a user writes: the data, a tiny model and a budget; the rest is planned."""
    config = tiny_raw_config(task, train=train, eval={"bleu": False})
    config["model"]["overrides"] = {"dropout": 0.05}
    del config["optimizer"], config["data"]["pipeline"]["batch_tokens"]
    del config["eval"]["every_steps"], config["checkpoint"]["every_steps"]
    if "max_steps" not in train:
        del config["train"]["max_steps"]
    path = tmp_path / "user.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_train_plans_what_the_user_left_unset_keeps_the_rest_and_resumes_the_same_plan(
    copy_task, tmp_path, capsys
):
    config = write_user_config(tmp_path, copy_task, max_steps=20, max_minutes=0)
    run_dir = tmp_path / "run"
    first = translator("train", "--config", config, "--run-dir", run_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    plan = Plan.from_json((run_dir / "plan.json").read_text())
    assert plan.budget.updates == 20 and plan.updates == 20
    assert plan.shape.name == "yours" and plan.shape.d_model == 64  # the tiny preset, kept
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["model"]["preset"] == "tiny"
    assert resolved["model"]["overrides"] == {"dropout": 0.05}  # set by the user: kept
    # Planned: the batch for 20 updates, a width-64 learning rate, validation at the end.
    assert resolved["data"]["pipeline"]["batch_tokens"] == plan.value("data.pipeline.batch_tokens")
    assert resolved["optimizer"]["peak_learning_rate"] == plan.value("optimizer.peak_learning_rate")
    assert plan.value("optimizer.peak_learning_rate") > 0.005  # narrower than 128: higher
    assert resolved["eval"]["every_steps"] == 0
    # The checkpoint cadence: the floor, where an update budget gives no pace.
    assert resolved["checkpoint"]["every_steps"] == plan.value("checkpoint.every_steps") == 500
    assert "plan: model.overrides.dropout = 0.05: set by you" in first.stderr
    summary = first.stdout.strip().splitlines()[0]
    assert summary.startswith("trained 20 updates of the plan's ~20 (yours (2+2 x 64")
    assert not NOISE.search(first.stderr)

    # The same command again, with a larger step budget: the run resumes with its plan.
    again = in_process(
        capsys, "train", "--config", config, "--run-dir", run_dir, "--set", "train.max_steps=30"
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "plan: resuming with the plan in" in again.stderr
    assert json.loads((run_dir / "model" / "metadata.json").read_text())["step"] == 30
    assert Plan.from_json((run_dir / "plan.json").read_text()) == plan


def test_more_minutes_on_a_finished_run_train_on_under_the_same_plan(copy_task, tmp_path, capsys):
    # Every planned value set: nothing is timed, so the run's minutes are all training.
    raw = tiny_raw_config(copy_task, train={"max_minutes": 0.15, "max_steps": 100_000})
    raw["optimizer"]["label_smoothing"] = 0.1
    config = tmp_path / "set.yaml"
    config.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "run"
    first = in_process(capsys, "train", "--config", config, "--run-dir", run_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    plan = Plan.from_json((run_dir / "plan.json").read_text())
    before = json.loads((run_dir / "model" / "metadata.json").read_text())
    assert "time budget of" in first.stdout

    # `--plan` shows the plan the new minutes give, and changes nothing.
    preview = in_process(capsys, "train", "--run-dir", run_dir, "--max-minutes", "0.3", "--plan")
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert "budget: 0.3 minutes" in preview.stdout, preview.stdout
    assert Plan.from_json((run_dir / "plan.json").read_text()) == plan
    again = in_process(capsys, "train", "--run-dir", run_dir, "--max-minutes", "0.3")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "train.max_minutes: 0.3 minutes in all, where the run was planned for 0.15" in (
        again.stderr
    )
    extended = Plan.from_json((run_dir / "plan.json").read_text())
    assert plan.budget.seconds == 9 and extended.budget.seconds == 18
    assert extended.choices == plan.choices and extended.shape == plan.shape
    after = json.loads((run_dir / "model" / "metadata.json").read_text())
    assert after["step"] > before["step"]
    assert f"time budget of {extended.budget.seconds / 60:.1f} minutes used" in again.stdout
    # The budget's clock spans both commands (each stops at its first update past it).
    assert after["budget_seconds"] >= extended.budget.seconds
    assert after["budget_seconds"] > before["budget_seconds"] >= plan.budget.seconds

    # No minutes left to train: one line names the key; the run is as it was.
    refused = in_process(capsys, "train", "--run-dir", run_dir, "--max-minutes", "0")
    assert refused.returncode == 2
    assert "error: train.max_minutes: 0 leaves no time to train this run" in refused.stderr
    assert Plan.from_json((run_dir / "plan.json").read_text()) == extended


def test_plan_times_the_shape_and_its_chosen_batch_on_the_real_pipeline_once_and_reuses_them(
    copy_task, tmp_path, capsys
):
    # Four hours of a tiny model buy far more tokens than the reference purchase: the
    # rule chooses a larger batch than the one shapes are timed at, so that one is timed
    # too, and what the budget buys is its speed's. (Four hours, not one half: on a busy
    # machine half an hour's purchase fell to the timed batch; only planning runs here.)
    config = write_user_config(tmp_path, copy_task, max_minutes=240)
    run_dir = tmp_path / "run"
    first = in_process(capsys, "train", "--config", config, "--run-dir", run_dir, "--plan")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "plan: timing yours (2+2 x 64" in first.stderr
    lines = first.stdout.splitlines()
    assert lines[0].startswith("corpus: 3,000 pairs,") and "(counted)" in lines[0]
    batch = int(
        next(line for line in lines if line.startswith("data.pipeline.batch_tokens = "))
        .split(" = ")[1]
        .split(":")[0]
    )
    assert batch != 2048  # the test's premise: another batch than the timed one
    timings = [line for line in first.stderr.splitlines() if "plan: timing yours" in line]
    assert [line.split(" at ")[-1] for line in timings] == [
        "2048 batch tokens",
        f"{batch} batch tokens",
    ]
    speed_line = next(line for line in lines if line.startswith("speed: yours "))
    assert f"at {batch:,} batch tokens (measured;" in speed_line
    # The measurement (what a later plan must reuse), not what it buys of this budget.
    measurement = speed_line.split(": would buy")[0]
    cached = json.loads((run_dir / "speed.json").read_text())["speeds"]
    assert sorted(key.split("@")[1] for key in cached) == sorted(["2048", str(batch)])
    for measured in cached.values():
        assert measured["tokens_per_second"] > 0 and measured["startup_seconds"] > 0
    buys = next(line for line in lines if line.startswith("buys: "))
    assert "updates" in buys
    assert not (run_dir / "plan.json").exists()  # --plan trains nothing and saves no plan

    second = in_process(capsys, "train", "--config", config, "--run-dir", run_dir, "--plan")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "plan: timing" not in second.stderr
    assert measurement in second.stdout  # the same measurement
    assert "measuring speeds took" not in second.stdout

    # Another run directory on the same machine: the machine's cache has both speeds.
    other = in_process(
        capsys, "train", "--config", config, "--run-dir", tmp_path / "other", "--plan"
    )
    assert other.returncode == 0, other.stderr[-3000:]
    assert "plan: timing" not in other.stderr and measurement in other.stdout


def test_plan_and_no_plan_together_are_one_error_line(copy_task, tmp_path, capsys):
    config = write_user_config(tmp_path, copy_task, max_steps=5)
    result = in_process(
        capsys, "train", "--config", config, "--run-dir", tmp_path / "r", "--plan", "--no-plan"
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("--plan and --no-plan: choose one")


def test_overrides_set_as_a_whole_fix_the_shape_and_its_dropout():
    from training.config import load_config
    from training.planning.measure import given_settings

    overrides = ["model.overrides={}", "train.max_steps=50"]
    given = given_settings(load_config(None, overrides), explicit_keys(None, overrides), (90, 90))
    assert given.shape is not None and given.shape.d_model == 256  # the preset's, as set
    assert given.dropout == 0.1 and given.batch_tokens is None  # the batch is still planned
    nothing = given_settings(load_config(None), frozenset(), (90, 90))
    assert nothing.shape is None and nothing.dropout is None
    assert nothing.subword_nbest is None and nothing.subword_alpha is None
    sampling = ["data.pipeline.subword_nbest=4"]
    given = given_settings(load_config(None, sampling), explicit_keys(None, sampling), (90, 90))
    assert given.subword_nbest == 4 and given.subword_alpha is None  # alpha still planned
    assert nothing.checkpoint_every_steps is None  # the cadence planned, unless set
    cadence = ["checkpoint.every_steps=10"]
    given = given_settings(load_config(None, cadence), explicit_keys(None, cadence), (90, 90))
    assert given.checkpoint_every_steps == 10


def test_a_model_cut_from_a_larger_one_is_fine_tuned_as_a_cut(tmp_path):
    """`train.init_from` naming a model whose metadata records a cut: `Given.cut`."""
    from training.config import load_config
    from training.planning.measure import given_settings

    model = tmp_path / "student"
    model.mkdir()
    (model / "metadata.json").write_text(json.dumps({"cut_from": {"model": "t"}}))
    cut = [f"train.init_from={model}"]
    given = given_settings(load_config(None, cut), explicit_keys(None, cut), (90, 90))
    assert given.fine_tuning and given.cut
    (model / "metadata.json").write_text(json.dumps({"step": 100}))  # a trained model
    given = given_settings(load_config(None, cut), explicit_keys(None, cut), (90, 90))
    assert given.fine_tuning and not given.cut


def test_a_config_that_sets_every_planned_value_spends_nothing_on_timing(
    copy_task, tmp_path, capsys
):
    config = tmp_path / "full.yaml"
    raw = tiny_raw_config(copy_task, train={"max_minutes": 1.0})
    raw["optimizer"]["label_smoothing"] = 0.1
    config.write_text(yaml.safe_dump(raw))
    result = in_process(
        capsys, "train", "--config", config, "--run-dir", tmp_path / "run", "--plan"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "plan: timing" not in result.stderr and not (tmp_path / "run" / "speed.json").exists()
    assert "buys: not measured (every planned value is set; nothing timed)" in result.stdout
    assert "budget: 1.0 minutes" in result.stdout


class _Accelerator:
    """A strategy on one accelerator of 80 GB, as the planner asks of one."""

    num_replicas_in_sync = 1

    def accelerator_memory(self) -> int:
        return 80 * 10**9

    def spans_workers(self) -> bool:
        return False


def _timing(tmp_path, name: str, seconds: float, strategy, clock=None):
    """A `Timing` over a fresh cache, for a vocabulary of 32,000 a side."""
    from training.config import RunConfig
    from training.planning.speed_cache import SpeedCache
    from training.planning.timing import Timing

    vocabulary = type("V", (), {"source_vocab_size": 32000, "target_vocab_size": 32000})()
    cache = SpeedCache(tmp_path / f"{name}.json", {"machine": name})
    clock = {} if clock is None else {"clock": clock}
    return Timing(seconds, RunConfig(), vocabulary, strategy, cache, **clock)


def test_on_an_accelerator_each_shape_is_timed_at_its_own_batch_and_none_is_scaled(
    tmp_path, monkeypatch
):
    """A GPU's speeds do not follow FLOPs (small shapes wait on kernel launches) and grow
    with the batch: every shape weighed is timed, the first at the timing batch, each
    then at the batch that speed would buy, and the next from where the last settled; the
    plan weighs those. On a CPU the larger shapes are scaled from the smallest instead
    (the control)."""
    from training.planning import timing as planning
    from training.planning.rules import SHAPES, Budget, CorpusCounts, Speed, make_plan

    timed: list[tuple[str, int]] = []

    def measure(shape, batch, config, vocabulary, strategy, seconds, **timing):
        timed.append((shape.name, batch))
        # Launch-bound: every shape about as fast, and 4x the tokens at 8x the batch.
        rate = 1e6 * (batch / 2048) ** (2 / 3) / (1 + shape.parameters / 2e8)
        return Speed(rate, 0.6 * batch, batch, measured=True, startup_seconds=1.0)

    monkeypatch.setattr(planning, "measure_speed", measure)
    counts = CorpusCounts(3_000_000, 400_000_000, 60_000_000)  # a large corpus
    memory = {shape.name: 65536 for shape in SHAPES}
    seconds = 3600.0
    timing = _timing(tmp_path, "gpu", seconds, _Accelerator())
    speeds = planning.time_shapes_at_their_batches(SHAPES, counts, 2048, timing, seconds, memory)
    assert set(speeds) == {shape.name for shape in SHAPES}  # all weighed, all timed
    assert all(speed.measured for speed in speeds.values())
    first = [next(batch for name, batch in timed if name == shape.name) for shape in SHAPES]
    settled = [speeds[shape.name].batch_tokens for shape in SHAPES]
    assert first[0] == 2048 and settled[0] > 2048  # the timing batch, then its own
    assert first[1:] == settled[:-1]  # each next shape starts where the last settled
    plan = make_plan(counts, Budget(seconds=seconds), speeds, memory_batch_tokens=memory)
    assert plan.shape.name != SHAPES[0].name  # fast enough for a larger shape
    assert plan.batch_tokens == speeds[plan.shape.name].batch_tokens
    # Cached: a second plan times nothing.
    timed.clear()
    again = _timing(tmp_path, "gpu", seconds, _Accelerator())
    assert (
        planning.time_shapes_at_their_batches(SHAPES, counts, 2048, again, seconds, memory)
        == speeds
    )
    assert timed == [] and again.charged == 0.0
    # The CPU's rule on the same timer: the smallest timed, the larger ones FLOP-scaled.
    cpu = _timing(tmp_path, "cpu", 60.0, _Accelerator())
    scaled = planning.time_shapes(SHAPES, counts, 2048, cpu, 60.0)
    assert not all(speed.measured for speed in scaled.values())


def test_compiling_ahead_is_not_charged_to_the_budget_but_bounds_the_timing(tmp_path, monkeypatch):
    """On a GPU a timing compiles for tens of seconds before its clock, as the run then
    does for its own steps: the budget is charged the steady timing alone, the compiling
    is reported beside it, and no timing starts once half the budget has gone by in wall
    time. (Charging the compiling, the control, leaves a 3-minute run a fraction of its
    minutes: the first H200 run's plan spent 135 s of 180 this way.)"""
    from training.planning import timing as planning
    from training.planning.rules import SHAPES, Budget, CorpusCounts, Speed, make_plan

    now = [0.0]
    timed: list[tuple[str, int]] = []

    def measure(shape, batch, config, vocabulary, strategy, seconds, **timing):
        timed.append((shape.name, batch))
        now[0] += 30.0 + 2.0  # compiling ahead, then the steady timing
        rate = 1e6 * (batch / 2048) ** (2 / 3)
        return Speed(rate, 0.6 * batch, batch, measured=True, compile_seconds=30.0)

    monkeypatch.setattr(planning, "measure_speed", measure)
    counts = CorpusCounts(3_000_000, 400_000_000, 60_000_000)
    memory = {shape.name: 65536 for shape in SHAPES}
    seconds = 180.0
    timing = _timing(tmp_path, "gpu", seconds, _Accelerator(), clock=lambda: now[0])
    speeds = planning.time_shapes_at_their_batches(SHAPES, counts, 2048, timing, seconds, memory)
    # Timings start at 0, 32 and 64 s; at 96 s half the 180 has gone by.
    assert len(timed) == 3 and now[0] == 96.0
    assert timing.charged == 3 * 2.0 and timing.compiled == 3 * 30.0
    assert speeds and all(speed.measured for speed in speeds.values())
    plan = make_plan(
        counts,
        Budget(seconds=seconds - timing.charged),
        speeds,
        memory_batch_tokens=memory,
        measuring_seconds=timing.charged,
        compiling_seconds=timing.compiled,
    )
    said = "measuring speeds took 6 s of it; compiling their steps took 90 s more, outside it"
    assert f"({said})" in plan.describe()[1]
    assert "30 s compiling before the clock" in next(
        line for line in plan.describe() if line.startswith("speed: ")
    )


@pytest.mark.parametrize("static", [False, True])
def test_a_prepared_corpus_counts_an_epochs_batches_as_it_makes_them(copy_task, tmp_path, static):
    """From a prepared corpus the plan's tokens per update are one epoch's, as its batches
    hold them (each bucket's last batch short); under static shapes the timing's, since
    an epoch's batches are full there but for buckets that fill none."""
    import itertools

    import numpy as np

    from training.config import load_config
    from training.planning.measure import count_corpus
    from training.planning.rules import Speed
    from translator.pipelines.prepare import prepare_corpus
    from translator.pipelines.prepared import PreparedCorpus
    from translator.pipelines.vocabulary import load_vocabulary

    config = load_config(write_user_config(tmp_path, copy_task))
    vocabulary = load_vocabulary(copy_task["vocab"])
    prepared = tmp_path / "prepared"
    prepare_corpus(*copy_task["train"], vocabulary, prepared, config.data.pipeline)
    pipeline = dataclasses.replace(config.data.pipeline, static_shapes=static, batch_tokens=512)
    data = dataclasses.replace(
        config.data, train_source="", train_target="", prepared=str(prepared), pipeline=pipeline
    )
    counts = count_corpus(dataclasses.replace(config, data=data), vocabulary)
    corpus = PreparedCorpus(prepared)
    chosen = corpus.buckets_for(pipeline)
    batches = len(corpus.epoch(chosen, 0))
    epoch = itertools.islice(corpus.batches(chosen), batches)
    tokens = sum(int(np.count_nonzero(labels)) for _, labels in epoch)
    full = Speed(1000.0, 0.95 * 512, 512, measured=True)  # a timing's
    if static:
        assert counts.buckets == () and counts.tokens_per_update(full, 512) == 0.95 * 512
    else:
        assert tokens == counts.target_tokens
        assert counts.tokens_per_update(full, 512) == pytest.approx(tokens / batches)
        assert tokens / batches < full.tokens_per_update  # (the premise: short batches)


@pytest.mark.parametrize("whole_epoch", [True, False])
def test_a_timing_reads_an_epochs_short_batches_whole_or_by_half_batches(
    copy_task, tmp_path, whole_epoch
):
    """A short epoch is timed whole after a whole one of warm-up: its tokens per update
    are exactly the epoch's, short batches and all. A longer one times full batches, then
    as many half ones, for the seconds an update costs whatever its tokens."""
    from training.config import load_config
    from training.planning import measure, timing
    from training.planning.measure import count_corpus
    from training.planning.timing import measure_speed
    from training.run import on_backend
    from translator.pipelines.vocabulary import load_vocabulary

    config, strategy, _ = on_backend(load_config(write_user_config(tmp_path, copy_task)))
    vocabulary = load_vocabulary(copy_task["vocab"])
    counts = count_corpus(config, vocabulary)
    # (the premise: an epoch of more batches than a timing's eight, up to the bound or
    # over it; the smaller the batch, the larger the share of an update's fixed cost)
    short, long = (
        range(9, timing.EPOCH_TIMED_BATCHES + 1),
        range(timing.EPOCH_TIMED_BATCHES + 1, 1000),
    )
    batch_tokens = next(
        tokens
        for tokens in (256, 512, 1024, 2048, 4096)
        if counts.epoch_batches(tokens) in (short if whole_epoch else long)
    )
    batches = counts.epoch_batches(batch_tokens)
    sizes = (vocabulary.source_vocab_size, vocabulary.target_vocab_size)
    shape = measure.shape_of(config.model.transformer_config(*sizes), config.model.preset)
    speed = measure_speed(
        shape, batch_tokens, config, vocabulary, strategy, 60.0, epoch_batches=batches
    )
    epoch = counts.target_tokens / batches
    full_seconds = speed.tokens_per_update / speed.tokens_per_second
    if whole_epoch:
        assert speed.tokens_per_update == pytest.approx(epoch) and speed.fixed_seconds == 0
    else:  # eight updates of full batches, then eight of half ones
        assert 0 < speed.fixed_seconds <= full_seconds


@pytest.mark.parametrize("seconds", [float("inf"), 0.0])
def test_an_epochs_warm_up_ends_early_when_the_timings_seconds_pass(seconds):
    """A whole epoch's warm-up and timing take their updates while time allows; past the
    timing's seconds the warm-up is the usual two looks and the timing stops at once."""
    from training.planning.timing import WARMUP_UPDATES, _clock

    class Model:
        stop_training, updates = False, 0

        def updates_done(self):
            return self.updates

    model, clock = Model(), _clock(20, 20, seconds)
    clock.set_model(model)
    clock.on_train_begin()
    while not model.stop_training:
        model.updates += 1
        clock.on_train_batch_end(model.updates, {"tokens": 100.0 * model.updates})
    if seconds:
        assert model.updates == 40 and clock.warmup == 20
    else:
        assert model.updates == WARMUP_UPDATES + 2 and clock.warmup == WARMUP_UPDATES


def test_an_updates_fixed_seconds_are_where_the_line_through_two_batches_meets_no_tokens():
    """Two (seconds, tokens) points of a line give its value at no tokens, within [0, a
    full update's seconds]; batches too alike to tell a slope give 0 (nothing assumed)."""
    from training.planning.timing import fixed_seconds

    assert fixed_seconds((0.224, 1838.0), (0.140, 916.0)) == pytest.approx(
        0.224 - (0.224 - 0.140) / (1838 - 916) * 1838
    )
    assert fixed_seconds((0.2, 2000.0), (0.1, 1000.0)) == 0.0  # proportional: none
    assert fixed_seconds((0.2, 2000.0), (0.12, 1000.0)) == pytest.approx(0.04)
    assert fixed_seconds((0.2, 2000.0), (0.05, 1000.0)) == 0.0  # (noise below the origin)
    assert fixed_seconds((0.2, 2000.0), (0.25, 1000.0)) == 0.2  # (half slower: all fixed)
    assert fixed_seconds((0.2, 2000.0), (0.19, 1900.0)) == 0.0  # (too close to tell)


def test_a_jax_plan_from_a_prepared_corpus_times_one_bucket_and_reports_its_compiling(
    copy_task, tmp_path
):
    """From a prepared corpus a timing trains on its commonest bucket alone: one program
    compiled ahead per timing, where the run compiles one per bucket (the control, the
    premise). The plan reports that compiling apart from the seconds it charges."""
    import re

    from training.config import load_config
    from translator.pipelines.prepare import prepare_corpus
    from translator.pipelines.prepared import PreparedCorpus
    from translator.pipelines.vocabulary import load_vocabulary

    path = write_user_config(tmp_path, copy_task, max_minutes=240)
    raw = yaml.safe_load(path.read_text())
    pipeline = load_config(path).data.pipeline
    prepared = tmp_path / "prepared"
    prepare_corpus(*copy_task["train"], load_vocabulary(copy_task["vocab"]), prepared, pipeline)
    static = dataclasses.replace(pipeline, static_shapes=True, batch_tokens=2048)
    corpus = PreparedCorpus(prepared)
    assert len(corpus.batch_shapes(corpus.buckets_for(static))) > 1  # the run's: several
    raw["data"].update(train_source="", train_target="", prepared=str(prepared))
    raw["train"]["backend"] = "jax"
    path.write_text(yaml.safe_dump(raw))

    result = translator("train", "--config", path, "--run-dir", tmp_path / "run", "--plan")
    assert result.returncode == 0, result.stderr[-3000:]
    timings = re.findall(r"plan: timing yours .* at (\d+) batch tokens", result.stderr)
    compiled = re.findall(r"compiled the training step for (\d+) batch shape", result.stderr)
    assert timings and compiled == ["1"] * len(timings), result.stderr[-3000:]
    budget = next(line for line in result.stdout.splitlines() if line.startswith("budget: "))
    assert "compiling their steps took" in budget and "outside it" in budget
    cached = json.loads((tmp_path / "run" / "speed.json").read_text())["speeds"]
    assert all(speed["compile_seconds"] > 0 for speed in cached.values())


def test_a_smaller_vocabulary_is_timed_on_the_same_batches_their_ids_folded_into_its_size(
    copy_task, tmp_path
):
    """The output layer's share of the time is measured by timing the model of a smaller
    vocabulary on the run's own batches, every real id folded into its size (padding stays
    0, real tokens stay real), the two models in turn."""
    import numpy as np

    from training.config import load_config
    from training.inputs import timing_input
    from training.planning.rules import SHAPES
    from training.planning.speed_cache import SpeedCache
    from training.planning.timing import Timing
    from training.run import on_backend
    from translator.pipelines.vocabulary import load_vocabulary

    config, strategy, _ = on_backend(load_config(write_user_config(tmp_path, copy_task)))
    vocabulary = load_vocabulary(copy_task["vocab"])
    whole, _ = timing_input(config, vocabulary, strategy)
    limited, _ = timing_input(config, vocabulary, strategy, id_limit=10)

    def folded(ids):  # every real id into 1..9, padding 0
        return np.where(ids > 0, (ids - 1) % 9 + 1, 0)

    for (ids, labels), (small_ids, small_labels), _ in zip(whole, limited, range(3), strict=False):
        for name in ("source_ids", "decoder_input_ids"):
            big, small = np.asarray(ids[name]), np.asarray(small_ids[name])
            assert (big >= 10).any()  # the premise: ids the smaller model has no row for
            assert (big == 10).any()  # (and one that modulo 10 would make padding)
            np.testing.assert_array_equal(small, folded(big))
        np.testing.assert_array_equal(np.asarray(small_labels), folded(np.asarray(labels)))

    # Both models timed in turn on the real pipeline, each through its stepper.
    shape = dataclasses.replace(SHAPES[0], encoder_layers=1, decoder_layers=1, d_model=32)
    cache = SpeedCache(tmp_path / "speed.json", {"test": 1})
    timing = Timing(300.0, config, vocabulary, strategy, cache)
    full, small = timing.split(shape, 1024, 10)
    for speed in (full, small):
        assert speed.tokens_per_second > 0 and speed.measured
        assert 0 < speed.tokens_per_update <= 1024
    # The same batches, so the same tokens an update: the ids differ, not the lengths.
    assert full.tokens_per_update == small.tokens_per_update
    assert timing.for_vocabulary > 0 and timing.charged == 0.0
    # The smaller size is cached apart from the run's own: another entry, by its size.
    assert cache.get(shape, 1024, 10) == small
    assert cache.get(shape, 1024) is None  # (the run's: the caller's to keep)


def test_a_trained_run_teaches_later_plans_the_pace_it_trained_at(copy_task, tmp_path, capsys):
    """A timing is a few updates; the run's steady pace, over all its updates, replaces
    it in the caches, and the next plan on this machine buys at that pace."""
    from training.planning.speed_cache import SpeedCache
    from training.record import RunRecord

    # The run ends at its 60th update, well inside its budget (enough looks for a steady
    # pace): a budget of one minute ran out after one update in the CI of be580b1, whose
    # first update (tracing) took most of it beside the other worker. The batch is the
    # user's: a pace slower than the timing's may choose another batch, which the next
    # plan would time (CI of 7db6337: 17,238 target tokens/s against 20,598).
    config = write_user_config(tmp_path, copy_task, max_minutes=3.0, max_steps=60)
    raw = yaml.safe_load(config.read_text())
    raw["data"]["pipeline"]["batch_tokens"] = 2048
    config.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "run"
    trained = in_process(capsys, "train", "--config", config, "--run-dir", run_dir)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "later plans on this machine use the run's" in trained.stderr, trained.stderr[-3000:]
    plan = Plan.from_json((run_dir / "plan.json").read_text())
    timed = plan.speeds[plan.shape.name]
    cached = json.loads((run_dir / "speed.json").read_text())["speeds"]
    learned = cached[SpeedCache.key(plan.shape, plan.batch_tokens)]
    assert learned["tokens_per_second"] != timed.tokens_per_second  # the run's, not the timing's
    # The pace leaves out the start and validation: at least the run's overall rate.
    record = RunRecord.read(run_dir / "model")
    overall = record.target_tokens / record.budget_seconds
    assert learned["tokens_per_second"] >= overall
    assert learned["startup_seconds"] == timed.startup_seconds
    # The pace is of the epoch's batches, short ones included: no fixed cost added again.
    assert learned["fixed_seconds"] == 0

    # It also leaves the share of its timing's pace it sustained, for this machine's plans:
    # an update's seconds as the timing predicted them, over the run's own.
    from training.planning.rules import seconds_per_update
    from training.planning.speed_cache import sustained_share

    signature = json.loads((run_dir / "speed.json").read_text())["signature"]
    share, runs = sustained_share(signature)
    predicted = seconds_per_update(plan.corpus, timed, plan.batch_tokens)
    run_seconds = learned["tokens_per_update"] / learned["tokens_per_second"]
    assert runs == 1 and share == pytest.approx(predicted / run_seconds, rel=1e-3)

    # The next plan of this corpus buys at the run's pace, not cut again by the share.
    other = in_process(capsys, "train", "--config", config, "--run-dir", tmp_path / "b", "--plan")
    assert other.returncode == 0, other.stderr[-3000:]
    assert "plan: timing" not in other.stderr
    assert f"yours {learned['tokens_per_second']:,.0f} target tokens/s" in other.stdout
    assert "a trained run's pace" in other.stdout
    # A plan of another corpus (other length limits: another signature, the same machine)
    # times afresh, and counts its timing at the share runs here sustained.
    args = ["--set", "data.pipeline.max_target_length=100", "--plan"]
    third = in_process(capsys, "train", "--config", config, "--run-dir", tmp_path / "c", *args)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "plan: timing" in third.stderr
    assert f"runs on this machine trained at {share:.2f} of their timings' pace" in third.stderr
    line = next(line for line in third.stdout.splitlines() if "speed: yours" in line)
    cut = re.search(r"yours ([\d,]+) target tokens/s .*; ([\d.]+) x its timing's ([\d,]+)", line)
    assert cut and float(cut[2]) == round(share, 2), line
    rate, timed_rate = (float(cut[i].replace(",", "")) for i in (1, 3))
    assert rate == pytest.approx(share * timed_rate, abs=1.0), line


@pytest.mark.parametrize("broken", [None, "not json", '{"x": 1}'])
def test_a_machines_sustained_share_is_the_median_of_its_last_runs_of_any_corpus(
    tmp_path, monkeypatch, broken
):
    """`sustained_share`: the median of the last `SUSTAINED_RUNS` shares recorded under the
    same machine, precision and strategy, whatever the corpus; (1.0, 0) before any run, and
    from a file that cannot be read."""
    from training.planning import speed_cache

    monkeypatch.setenv("TRANSLATOR_CACHE_DIR", str(tmp_path))
    signature = {"processor": "cpu x2", "precision": "float32", "vocabulary_sizes": [8000, 8000]}
    if broken is not None:
        (tmp_path / speed_cache.SUSTAINED_FILE).write_text(broken)
    assert speed_cache.sustained_share(signature) == (1.0, 0)
    for share in (0.5, 0.95, 0.9, 0.8, 0.92, 0.85):
        other_corpus = {**signature, "vocabulary_sizes": [2000, 2000], "mean_target_length": 9}
        speed_cache.record_sustained(other_corpus, share)
    assert speed_cache.SUSTAINED_RUNS == 5  # (0.5, the oldest, is out)
    assert speed_cache.sustained_share(signature) == (0.9, 5)
    # Another precision is another machine's.
    assert speed_cache.sustained_share({**signature, "precision": "mixed_bfloat16"}) == (1.0, 0)


def test_each_kind_of_timing_counts_at_the_share_runs_planned_on_it_sustained(
    tmp_path, monkeypatch
):
    """A shape's own timing (cold) and the vocabulary's in turn (warm) stand apart from
    what their runs sustain (about 0.99 and 0.92 on one machine: bench/RESULTS.md,
    "Vocabulary by the budget"), so each kind has its own share; a timing in turn before
    any run planned on one counts at the shape timings' share, and a run's pace at none."""
    from training.planning import measure, speed_cache
    from training.planning.rules import Speed

    monkeypatch.setenv("TRANSLATOR_CACHE_DIR", str(tmp_path))
    timing = _timing(tmp_path, "cpu", 300.0, _Accelerator())
    signature = timing.cache.signature
    cold = Speed(1000.0, 900.0, 2048, measured=True)
    warm = dataclasses.replace(cold, in_turn=True)
    learned = dataclasses.replace(cold, learned=True)

    def rates():
        sustain = measure._sustained(timing, _Accelerator())
        return [round(sustain(speed).tokens_per_second) for speed in (cold, warm, learned)]

    assert rates() == [1000, 1000, 1000]  # no run yet
    speed_cache.record_sustained(signature, 0.9)
    assert rates() == [900, 900, 1000]  # none in turn yet: the shapes' share
    speed_cache.record_sustained(signature, 0.6, in_turn=True)
    assert rates() == [900, 600, 1000]
    assert speed_cache.sustained_share(signature) == (0.9, 1)
    assert speed_cache.sustained_share(signature, in_turn=True) == (0.6, 1)

    # A run records its share under its plan's kind of timing.
    from training.planning.rules import (
        SHAPES,
        Budget,
        CorpusCounts,
        make_plan,
        seconds_per_update,
    )

    monkeypatch.setattr(measure, "_speed_cache", lambda *args: timing.cache)
    counts = CorpusCounts(29_000, 3_820_000, 474_000)
    for speed, in_turn, before in ((warm, True, 0.6), (cold, False, 0.9)):
        plan = make_plan(counts, Budget(seconds=300.0), {SHAPES[0].name: speed})
        # The run's updates took twice the seconds its timing said: it sustained 0.5.
        seconds = seconds_per_update(counts, speed, plan.batch_tokens)
        pace = (speed.tokens_per_second, 2 * seconds * speed.tokens_per_second)
        measure.learn_speed(plan, pace, None, None, _Accelerator(), "float32", tmp_path)
        share = speed_cache.sustained_share(signature, in_turn)
        assert share == (pytest.approx((before + 0.5) / 2), 2)


def test_a_cpu_hidden_behind_one_name_is_told_apart_by_its_generation():
    """Two virtual CPUs both called "AMD EPYC" (AVX2 only, and AVX-512: 4x apart in
    training speed here) get their own speed caches, as does a cap on oneDNN's
    instructions; the same CPU gets the same."""
    from training.planning.speed_cache import describe_processor

    def cpuinfo(family: int, model: int, flags: str) -> str:
        block = f"processor\t: {{}}\nmodel name\t: AMD EPYC\ncpu family\t: {family}\n"
        block += f"model\t\t: {model}\nflags\t\t: fpu sse2 {flags}\n"
        return "\n".join(block.format(n) for n in range(2))

    zen2 = describe_processor(cpuinfo(23, 1, "avx avx2 fma"))
    zen4 = describe_processor(cpuinfo(25, 17, "avx avx2 avx512f avx512bw"))
    assert zen2 == "AMD EPYC (family 23 model 1, AVX2)"
    assert zen4 == "AMD EPYC (family 25 model 17, AVX-512)"
    assert describe_processor(cpuinfo(25, 17, "avx avx2 avx512f"), "AVX2") != zen4
    assert describe_processor("") == ""  # (no /proc/cpuinfo: the platform's name)


@pytest.mark.parametrize("budget, split_seconds", [(300.0, 20.0), (60.0, 6.0)])
def test_the_vocabulary_split_is_timed_in_turn_and_outside_the_budget(
    tmp_path, monkeypatch, budget, split_seconds
):
    """Under few epochs the chosen shape is timed under its vocabulary and half of it, in
    turn: a token's cost is the line through those two, the run's speed so timed (warm)
    is what the budget buys, and the timing is not charged to the budget (the
    vocabulary's cost, as building it is), for at most 20 s or a tenth of the budget
    each. From the cache nothing is timed again."""
    from training.planning import measure as planning
    from training.planning import timing
    from training.planning.rules import SHAPES, Budget, CorpusCounts, Speed, make_plan
    from training.planning.vocabulary import VocabularyTrade

    now, timed = [0.0], []

    def measure(shape, batch, config, vocabulary, strategy, seconds, output=None, **_):
        timed.append(output)
        now[0] += 10.0
        return Speed(6000.0, 1700.0, batch, measured=True, startup_seconds=0.5)

    def in_turn(shape, batch, config, vocabulary, strategy, output, seconds):
        timed.append(("in turn", output))
        assert seconds == 2 * split_seconds
        now[0] += 25.0
        return (
            Speed(7000.0, 1700.0, batch, measured=True, compile_seconds=2.0),
            Speed(9000.0, 1700.0, batch, measured=True, compile_seconds=2.0),
        )

    monkeypatch.setattr(timing, "measure_speed", measure)
    monkeypatch.setattr(timing, "measure_in_turn", in_turn)
    timing = _timing(tmp_path, "cpu", budget, _Accelerator(), clock=lambda: now[0])
    cold = timing.speed(SHAPES[0], 2048, always=True)
    charged = timing.charged
    assert charged == 10.0
    counts = CorpusCounts(29_000, 3_820_000, 474_000)
    trade = VocabularyTrade(32_000, lambda shape, size: float(size))
    plan = make_plan(counts, Budget(seconds=budget), {SHAPES[0].name: cold}, vocabulary=trade)
    measured, warm = planning._timed_output_cost(timing, plan, trade)
    assert timed == [None, ("in turn", 16_000)]  # the run's size, then both in turn
    # Not charged; compiling (JAX) apart, as a run's own is.
    assert timing.charged == charged and timing.for_vocabulary == 21.0
    assert timing.compiled == 4.0
    assert warm.tokens_per_second == 7000.0 and warm.startup_seconds == cold.startup_seconds
    # A token's seconds: 1/7000 at 32,000 entries, 1/9000 at 16,000, on a line.
    assert measured.cost(SHAPES[0], 32_000) == pytest.approx(1 / 7000)
    assert measured.cost(SHAPES[0], 16_000) == pytest.approx(1 / 9000)
    assert measured.timed and measured.basis == "timed at 32,000 and 16,000 entries, in turn"
    # Cached, the warm speed as the run's: the same question times nothing, and from
    # the cache alone it is answered.
    assert timing.speed(SHAPES[0], plan.batch_tokens) == warm
    again = planning._timed_output_cost(timing, plan, trade, time=False)
    assert timed == [None, ("in turn", 16_000)] and again[1] is None
    assert again[0].cost(SHAPES[0], 16_000) == pytest.approx(1 / 9000)


def test_turns_alternate_abba_and_the_drift_falls_on_both_models(copy_task, tmp_path, monkeypatch):
    """`measure_in_turn` times the two models in turns A B B A A B..., each turn on its
    own: on a machine that slows steadily through the timing, the two speeds' ratio is
    the models' own (turns A B A B... read it 6% apart here)."""
    from training.config import load_config
    from training.planning import timing as planning
    from training.planning.rules import SHAPES
    from training.run import on_backend
    from translator.pipelines.vocabulary import load_vocabulary

    config, strategy, _ = on_backend(load_config(write_user_config(tmp_path, copy_task)))
    vocabulary = load_vocabulary(copy_task["vocab"])
    now, order = [0.0], []
    cost = {None: 2.0, 10: 1.0}  # seconds per update at the machine's start: A twice B

    class Trainer:
        compiled_seconds = 0.5

        def __init__(self, limit):
            self.limit = limit

        def expect_shapes(self, shapes):
            pass

        def stepper(self, data):
            def step(n):
                order.append(self.limit)
                for _ in range(n):
                    now[0] += cost[self.limit] * (1 + 0.01 * now[0])  # slowing down
                return 1000.0 * n

            return step

    built = iter([None, 10])
    monkeypatch.setattr(planning.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(
        "training.engines.tf_trainer.build_trainer",
        lambda *args, **kwargs: (Trainer(next(built)), None),
    )
    shape = SHAPES[0]
    full, small = planning.measure_in_turn(
        shape, 1024, config, vocabulary, strategy, 10, 1e9, updates=16, turn=4
    )
    assert order == [None, 10] + [None, 10, 10, None] * 2  # warm-up turns, then ABBA
    assert full.tokens_per_update == small.tokens_per_update == 1000.0
    assert full.compile_seconds + small.compile_seconds == 1.0
    assert full.in_turn and small.in_turn  # (runs sustain their own share of such timings)
    assert small.tokens_per_second / full.tokens_per_second == pytest.approx(2.0, rel=0.01)


def test_speeds_known_from_the_vocabulary_stage_are_not_timed_again(tmp_path, monkeypatch):
    """Training's plan on a vocabulary built again takes the chosen shape's speeds the
    plan that sized it timed (`resized_speeds`): nothing is timed for them, and a speed
    cached under the new signature (measured here) is kept over them."""
    from training.planning import timing as planning
    from training.planning.rules import SHAPES, Speed
    from training.planning.speed_cache import SpeedCache

    timed = []

    def measure(shape, batch, *args, **kwargs):
        timed.append((shape.name, batch))
        return Speed(4000.0, 900.0, batch, measured=True)

    monkeypatch.setattr(planning, "measure_speed", measure)
    known = (
        (SpeedCache.key(SHAPES[0], 2048), Speed(1500.0, 900.0, 2048, measured=True)),
        (SpeedCache.key(SHAPES[0], 1024), Speed(1400.0, 900.0, 1024, measured=True)),
    )
    timing = _timing(tmp_path, "cpu", 300.0, _Accelerator())
    timing.cache.put(SHAPES[0], 1024, Speed(1300.0, 900.0, 1024, measured=True))
    timing.cache.seed(known)
    assert timing.speed(SHAPES[0], 2048, always=True).tokens_per_second == 1500.0
    assert timing.speed(SHAPES[0], 1024, always=True).tokens_per_second == 1300.0  # (cached)
    assert not timed and timing.charged == 0.0
    # The control: without them, the shape is timed.
    fresh = _timing(tmp_path, "cpu2", 300.0, _Accelerator())
    assert fresh.speed(SHAPES[0], 2048, always=True).tokens_per_second == 4000.0
    assert timed == [(SHAPES[0].name, 2048)]


@pytest.mark.parametrize("batch_tokens", [256, 1024])
def test_the_plan_counts_an_epochs_batches_as_the_pipeline_makes_them(
    copy_task, tmp_path, batch_tokens
):
    """An epoch ends every length bucket's batch short, so the updates a budget buys come
    from the epoch's batches, counted per bucket: exactly the tokens per update of one
    epoch of the real pipeline, not the timing's (full) batches'."""
    import numpy as np

    from training.config import load_config
    from training.planning.measure import count_corpus
    from training.planning.rules import CorpusCounts, Speed
    from translator.pipelines.dataset import make_dataset
    from translator.pipelines.vocabulary import load_vocabulary

    config = load_config(write_user_config(tmp_path, copy_task))
    pipeline = dataclasses.replace(config.data.pipeline, batch_tokens=batch_tokens)
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, pipeline=pipeline))
    vocabulary = load_vocabulary(copy_task["vocab"])
    counts = count_corpus(config, vocabulary)
    epoch = make_dataset(
        config.data.train_source, config.data.train_target, vocabulary, pipeline, training=True
    )
    batches = tokens = 0
    for _, labels in epoch:
        batches, tokens = batches + 1, tokens + int(np.count_nonzero(np.asarray(labels)))
    assert tokens == counts.target_tokens
    full = Speed(1000.0, 0.95 * batch_tokens, batch_tokens, measured=True)  # a timing's
    assert counts.tokens_per_update(full, batch_tokens) == pytest.approx(tokens / batches)
    assert tokens / batches < full.tokens_per_update  # (the premise: short batches)
    # Kept in plan.json; unknown (a mix, several replicas) it is the timing's.
    assert CorpusCounts(**json.loads(json.dumps(dataclasses.asdict(counts)))) == counts
    several = count_corpus(config, vocabulary, replicas=2)
    assert (
        several.buckets == ()
        and several.tokens_per_update(full, batch_tokens) == 0.95 * batch_tokens
    )
