"""Training on several corpora mixed by weight, and tagged corpora."""

import numpy as np
import pytest
import yaml

from tests.support.corpora import write_copy_corpus
from tests.support.runs import replace, tiny_raw_config, tiny_run_config
from training.config import ConfigError, load_config
from training.run import train
from training.run_dir import check_inputs
from translator.pipelines import PipelineConfig
from translator.pipelines.dataset import WeightedCorpus, drawn_shares, make_mixed_dataset
from translator.pipelines.errors import VocabularyError
from translator.pipelines.vocabulary import load_vocabulary

TAGS = ("<bt>", "<2de>")


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """Two small corpora and a vocabulary that keeps TAGS one piece each."""
    from translator.pipelines.vocab import build_vocabulary

    root = tmp_path_factory.mktemp("tagged")
    large = write_copy_corpus(root, 300, seed=21)
    small = write_copy_corpus(root, 40, seed=22, reverse=True)
    build_vocabulary(
        [large[0]],
        [large[1]],
        root / "vocab",
        vocab_size=41,
        byte_fallback=False,
        user_symbols=TAGS,
    )
    return {"large": large, "small": small, "vocab": load_vocabulary(root / "vocab")}


def _mix(tagged, weights=(3.0, 1.0), tags=("", "<bt>"), **pipeline):
    corpora = [
        WeightedCorpus(str(tagged[name][0]), str(tagged[name][1]), weight, tag)
        for name, weight, tag in zip(("large", "small"), weights, tags, strict=True)
    ]
    config = PipelineConfig(
        batch_tokens=256, max_source_length=16, max_target_length=16, **pipeline
    )
    return make_mixed_dataset(corpora, tagged["vocab"], config)


def test_the_drawn_proportions_match_the_weights(tagged):
    # ~2,000 pairs over 300 batches: a binomial share's standard deviation is ~0.01, so
    # 0.04 is four of them.
    shares = drawn_shares(_mix(tagged), 2, 300)
    assert abs(shares[0] - 0.75) < 0.04, shares
    shares = drawn_shares(_mix(tagged, weights=(1.0, 1.0)), 2, 300)
    assert abs(shares[0] - 0.5) < 0.04, shares


def test_every_pair_of_every_corpus_is_reachable(tagged):
    vocabulary = tagged["vocab"]
    seen = {0: set(), 1: set()}
    for features, _ in _mix(tagged, weights=(1.0, 1.0)).take(400):
        for corpus, row in zip(
            features["corpus"].numpy(), features["source_ids"].numpy(), strict=True
        ):
            seen[int(corpus)].add(tuple(int(t) for t in row if t not in (0, 3)))
    for index, name in enumerate(("large", "small")):
        lines = tagged[name][0].read_text().splitlines()
        tag = [vocabulary.tag_id("<bt>")] if index == 1 else []
        expected = {tuple(tag + ids) for ids in vocabulary.source.encode(lines)}
        assert seen[index] == expected


def test_a_tag_is_one_id_first_on_its_corpus_only(tagged):
    bt = tagged["vocab"].tag_id("<bt>")
    for features, _ in _mix(tagged).take(50):
        corpus, first = features["corpus"].numpy(), features["source_ids"].numpy()[:, 0]
        np.testing.assert_array_equal(first == bt, corpus == 1)


def test_a_tag_the_vocabulary_splits_is_refused(tagged):
    with pytest.raises(VocabularyError, match=r"tag '<xx>': .* splits it .* --user-symbols <xx>"):
        _mix(tagged, tags=("", "<xx>"))


def test_the_mix_is_a_function_of_the_seed_so_a_resume_continues_it(tagged):
    def batches(dataset, count):
        return [
            (f["corpus"].numpy().tolist(), f["source_ids"].numpy().tolist())
            for f, _ in dataset.take(count)
        ]

    whole = batches(_mix(tagged), 12)
    assert batches(_mix(tagged).skip(7), 5) == whole[7:]
    assert batches(_mix(tagged, seed=99), 12) != whole


def test_config_takes_a_list_of_weighted_tagged_corpora(copy_task, tagged, tmp_path):
    raw = tiny_raw_config(copy_task)
    data = raw["data"]
    del data["train_source"], data["train_target"]
    data["train"] = [
        {"source": str(tagged["large"][0]), "target": str(tagged["large"][1]), "weight": 2},
        {"source": str(tagged["small"][0]), "target": str(tagged["small"][1]), "tag": "<bt>"},
    ]
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(path)
    assert [c.weight for c in config.data.corpora()] == [2.0, 1.0]
    assert config.data.is_mix()
    check_inputs(config)

    zero = load_config(path, ["data.train=[{source: a, target: b, weight: 0}]"])
    with pytest.raises(ConfigError, match=r"data.train\[0\].weight: must be > 0"):
        check_inputs(zero)
    missing = load_config(path, [f"data.train=[{{source: {tmp_path}/none, target: b}}]"])
    with pytest.raises(ConfigError, match=r"data.train\[0\].source: file not found"):
        check_inputs(missing)
    both = load_config(path, [f"data.train_source={tagged['large'][0]}"])
    with pytest.raises(ConfigError, match="give one of them"):
        check_inputs(both)


def test_training_on_a_tagged_mix_logs_the_mix_drawn(copy_task, tagged, tmp_path, caplog):
    config = tiny_run_config(copy_task, train={"max_steps": 2})
    corpora = (
        {"source": str(tagged["large"][0]), "target": str(tagged["large"][1]), "weight": 3.0},
        {"source": str(tagged["small"][0]), "target": str(tagged["small"][1]), "tag": "<bt>"},
    )
    from training.config import TrainCorpus

    data = {
        "train_source": "",
        "train_target": "",
        "train": tuple(TrainCorpus(**corpus) for corpus in corpora),
        "vocabulary": str(tagged["vocab"].directory),
    }
    with caplog.at_level("INFO", logger="training.inputs"):
        result = train(replace(config, "data", **data), tmp_path / "run", verbose=0)
    assert result.steps == 2
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("mix:")]
    assert len(lines) == 2 and "weight 75.0%" in lines[0] and "(tag <bt>)" in lines[1]
