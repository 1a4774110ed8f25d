"""`SearchConfig`: how to search for translations (not what the network is)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from translator.config_base import DictConfig
from translator.errors import ConfigError

LengthPenaltyForm = Literal["gnmt", "power"]
LENGTH_PENALTY_FORMS = ("gnmt", "power")
SAMPLING_FORMS = "topk:K (the K most probable tokens; topk:0 = all) or topp:P (0 < P <= 1)"


@dataclasses.dataclass(frozen=True)
class SearchConfig(DictConfig):
    """Settings of greedy and beam search.

    Output length is limited per sentence to `floor(max_length_a * source_length +
    max_length_b)` tokens, EOS included (source EOS counted), clamped to
    `[1, max_output_length]`; at the limit only EOS may be produced.
    """

    # Hypotheses kept per sentence; 1 = greedy search (beam search with 1 beam is identical).
    beam_size: int = 4
    # Length-penalty exponent alpha, score = log P(Y) / lp(Y); 0 ranks by plain log P.
    # Must be >= 0 (early stopping relies on lp growing with length).
    length_penalty: float = 0.6
    # How the length penalty grows: "gnmt" ((5 + |Y|) / 6) ** alpha (Wu et al. 2016), or
    # "power" |Y| ** alpha (fairseq's and CTranslate2's normalization).
    length_penalty_form: LengthPenaltyForm = "gnmt"
    # Output length limit per sentence: a in floor(a * source_length + b).
    max_length_a: float = 1.2
    # Output length limit per sentence: b in floor(a * source_length + b).
    max_length_b: int = 10
    # Static cap on output tokens, EOS included: bounds the decoding cache of any batch.
    max_output_length: int = 256
    # Hypotheses returned per sentence, best first; at most beam_size (num_samples when
    # sampling, where it is how many a caller writes).
    n_best: int = 1
    # Fewest tokens before EOS (the length limit wins where shorter). The default 1 rules
    # out the empty translation, which an undertrained model may prefer.
    min_length: int = 1
    # True: a sentence's search ends once no alive hypothesis can outscore the n_best-th
    # finished one (exact). False: once a step's best candidate ends in EOS and n_best
    # are finished (OpenNMT-py's and CTranslate2's rule): fewer steps, may miss a longer one.
    exact_stop: bool = True
    # Draw each next token instead of searching ("": search): "topk:K" among the K most
    # probable (topk:0: all), "topp:P" nucleus sampling. beam_size is then not used.
    sampling: str = ""
    # Sampling: the logits are divided by it before the draw (< 1 sharper, > 1 flatter).
    temperature: float = 1.0
    # Sampling: the draws are a function of it and the batch, so a run is repeatable.
    seed: int = 0
    # Sampling: draws per sentence, returned best first as its n-best list.
    num_samples: int = 1

    @property
    def sampled(self) -> bool:
        """Whether tokens are drawn (`sampling`) rather than searched for."""
        return bool(self.sampling)

    @property
    def sampling_rule(self) -> tuple[str, float]:
        """`sampling` parsed: ("topk", K) or ("topp", P).

        Raises:
            ConfigError: a malformed value.
        """
        method, _, value = self.sampling.partition(":")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        valid = (method == "topk" and number >= 0 and number == int(number)) or (
            method == "topp" and 0 < number <= 1
        )
        if not valid:
            raise ConfigError(f"sampling must be {SAMPLING_FORMS}, got {self.sampling!r}")
        return method, number

    @property
    def hypotheses(self) -> int:
        """Hypotheses returned per sentence: n_best, or num_samples when sampling."""
        return self.num_samples if self.sampled else self.n_best

    def __post_init__(self) -> None:
        problems = []
        if self.beam_size < 1:
            problems.append(f"beam_size must be >= 1, got {self.beam_size}")
        name, bound = "beam_size", self.beam_size
        if self.sampling:  # every draw is returned: n_best says how many are written
            name, bound = "num_samples", self.num_samples
        if not 1 <= self.n_best <= max(bound, 1):
            problems.append(f"n_best must be in [1, {name}={bound}], got {self.n_best}")
        if self.length_penalty < 0:
            problems.append(f"length_penalty must be >= 0, got {self.length_penalty}")
        if self.length_penalty_form not in LENGTH_PENALTY_FORMS:
            problems.append(
                f"length_penalty_form must be one of {LENGTH_PENALTY_FORMS}, "
                f"got {self.length_penalty_form!r}"
            )
        if self.max_length_a < 0:
            problems.append(f"max_length_a must be >= 0, got {self.max_length_a}")
        if self.min_length < 0:
            problems.append(f"min_length must be >= 0, got {self.min_length}")
        if self.max_output_length < 1:
            problems.append(f"max_output_length must be >= 1, got {self.max_output_length}")
        if self.sampling:
            try:
                self.sampling_rule  # noqa: B018  (parses, or raises)
            except ConfigError as error:
                problems.append(str(error))
        if not self.temperature > 0:
            problems.append(f"temperature must be > 0, got {self.temperature}")
        if not 0 <= self.seed < 2**31:
            problems.append(f"seed must be in [0, 2**31), got {self.seed}")
        if self.num_samples < 1:
            problems.append(f"num_samples must be >= 1, got {self.num_samples}")
        if problems:
            raise ConfigError("Invalid SearchConfig: " + "; ".join(problems))
