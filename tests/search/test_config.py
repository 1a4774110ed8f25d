import dataclasses

import pytest

from translator.search import SearchConfig


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(beam_size=0), "beam_size"),
        (dict(beam_size=2, n_best=3), "n_best"),
        (dict(n_best=0), "n_best"),
        (dict(length_penalty=-0.1), "length_penalty"),
        (dict(max_length_a=-1.0), "max_length_a"),
        (dict(max_output_length=0), "max_output_length"),
    ],
)
def test_invalid_values_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        SearchConfig(**fields)


def test_frozen_and_dict_round_trip():
    config = SearchConfig(beam_size=5, n_best=2, length_penalty=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.beam_size = 3  # type: ignore[misc]
    assert SearchConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="beam_sise"):
        SearchConfig.from_dict({"beam_sise": 4})


def test_defaults_are_the_papers():
    config = SearchConfig()
    assert (config.beam_size, config.length_penalty) == (4, 0.6)  # Vaswani et al. 2017
