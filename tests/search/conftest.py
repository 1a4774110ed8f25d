"""The search tests' model and batch: a tiny random Transformer and six sources."""

import numpy as np
import pytest

from tests.support.models import random_sources, tiny_model

# The model's vocabulary, and the source lengths (EOS included) of the batch.
VOCAB = 16
LENGTHS = [5, 2, 7, 4, 3, 6]


@pytest.fixture(scope="module")
def model():
    # Peaked distributions and an EOS that is sometimes, not always, the best token.
    return tiny_model(VOCAB, seed=1, logit_scale=2.0, eos_bias=3.0, constant_eos=True)


@pytest.fixture(scope="module")
def source():
    return random_sources(np.random.default_rng(3), LENGTHS, VOCAB)
