"""The Python API: load a trained model and translate or score strings, in two lines.

    import translator
    model = translator.load("runs/multi30k/run")       # a run, model or CTranslate2 dir
    model.translate(["A man is riding a bike."])       # ["Ein Mann fährt Fahrrad."]

It goes the commands' way: `translator.engines.load_translator` builds what
`translator translate` builds (same engines, same `SearchConfig` defaults), and
`translator.forced.PairScorer` scores as `translator score-pairs` does. A SavedModel
export is what `translator serve` runs; it is not loaded here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, overload

from translator.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from translator.engines.base import InferenceOptions
    from translator.forced import PairScorer
    from translator.inference import Hypothesis, Translator
    from translator.search.config import SearchConfig


class Aligned(NamedTuple):
    """A translation and its word alignment (`Model.translate(..., alignments=True)`)."""

    text: str
    # Pharaoh pairs "i-j": source word i to target word j, from 0 (`translator.alignment`).
    alignment: str


# Searches a `Model` keeps built (each holds its own copy of the model's weights).
KEPT_SEARCHES = 4


class Model:
    """A loaded model: `translate` and `score`. Made by `load`.

    Each distinct search (beam size, n-best, target language, seed, ...) is built on its
    first use, loading the model as `translator translate` does, and the last
    `KEPT_SEARCHES` are kept: the first call with new settings takes seconds, the next
    ones only decode.
    """

    def __init__(self, path: Path, options: InferenceOptions):
        self.path = path
        self.options = options
        self._translators: dict[tuple[SearchConfig, str], Translator] = {}
        self._scorers: dict[str, PairScorer] = {}

    def __repr__(self) -> str:
        return f"translator.Model({str(self.path)!r}, engine={self.options.engine!r})"

    @overload
    def translate(self, sentences: str, **settings) -> str: ...
    @overload
    def translate(self, sentences: Sequence[str], **settings) -> list[str]: ...

    def translate(
        self,
        sentences: str | Sequence[str],
        *,
        beam_size: int | None = None,
        n_best: int = 1,
        target_lang: str | None = None,
        tag: str = "",
        alignments: bool = False,
        **search,
    ):
        """Translates sentences.

        Args:
            sentences: One text, or a list of them: each a paragraph, whose sentences are
                translated apart and rejoined (unless loaded with `split=False`).
            beam_size: Hypotheses kept per sentence; 1 is greedy (default: `SearchConfig`'s,
                as `translator translate`).
            n_best: With more than 1, each sentence gets a list of its `n_best` best
                translations, best first.
            target_lang: The target language of a multilingual model ("de": the tag
                <2de>, or >>deu<< for an imported OPUS-MT model), as `--target-lang`.
            tag: A tag of the vocabulary to prepend to every source, as `--tag`.
            alignments: Give an `Aligned` (the text and its word alignment, as
                `translate --alignments` writes it) in place of each string.
            **search: Any other `translator.search.SearchConfig` field, e.g.
                `length_penalty=1.0`, `sampling="topk:10"`, `seed=3`.

        Returns:
            The translation of each sentence, in order ("" for an empty one): a string per
            sentence, or with `n_best` > 1 a list of strings; for one sentence given as a
            string, its translation alone.

        Raises:
            ConfigError: a setting the search or engine does not take, naming it.
        """
        single = isinstance(sentences, str)
        lines = [sentences] if single else list(sentences)
        settings = dict(search, n_best=n_best)
        if beam_size is not None:
            settings["beam_size"] = beam_size
        translator = self._translator(settings, self._tag(tag, target_lang))
        found = translator.search(lines, alignments=alignments).hypotheses

        def output(hypothesis: Hypothesis | None):
            text = hypothesis.text if hypothesis else ""
            if not alignments:
                return text
            return Aligned(text, (hypothesis.alignment or "") if hypothesis else "")

        if n_best == 1:
            texts: list = [output(each[0] if each else None) for each in found]
        else:  # (sampling gives `num_samples` draws; the n best of them, as `translate`)
            texts = [[output(hypothesis) for hypothesis in each[:n_best]] for each in found]
        return texts[0] if single else texts

    def translate_html(self, page: str, **settings) -> str:
        """An HTML page (or fragment) translated, its markup kept (`translate --format html`).

        Args:
            page: The HTML text.
            **settings: As `translate` (beam_size, target_lang, tag, search fields).

        Returns:
            The page with each block's text translated, its tags put back by the word
            alignments; what was malformed is repaired and logged once as a warning.
        """
        import logging

        from translator.markup import translate_page

        def translate(paragraphs: list[str]) -> list[tuple[str, str]]:
            found = self.translate(paragraphs, alignments=True, **settings)
            return [(aligned.text, aligned.alignment) for aligned in found]

        translated, repairs = translate_page(page, translate)
        if repairs:
            logging.getLogger("translator").warning(
                "repaired the page as a browser reads it: %s", "; ".join(repairs)
            )
        return translated

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        *,
        target_lang: str | None = None,
        tag: str = "",
    ) -> list[float | None]:
        """The model's log P(target | source) of each pair, as `translator score-pairs`.

        The sum over the target's pieces and EOS (the search's score with
        `length_penalty=0`); None for a pair whose source or target is blank.

        Raises:
            ConfigError: sources and targets of different lengths, or a CTranslate2 export
                (scoring runs the model directory's Keras model).
        """
        if len(sources) != len(targets):
            raise ConfigError(f"{len(sources)} sources for {len(targets)} targets")
        tag = self._tag(tag, target_lang)
        scorer = self._scorers.get(tag)
        if scorer is None:
            from translator.engines import uses_ctranslate2
            from translator.forced import PairScorer

            if uses_ctranslate2(self.path, self.options.engine):
                raise ConfigError(
                    f"{self.path}: scoring runs our Keras model; load the model directory the "
                    "CTranslate2 export was written from"
                )
            scorer = self._scorers[tag] = PairScorer.from_model_dir(
                str(self.path),
                batch_tokens=self.options.batch_tokens,
                max_source_length=self.options.max_source_length,
                tag=tag,
            )
        scored = scorer.score(list(sources), list(targets))
        return [None if score is None else score.total for score in scored.scores]

    def _tag(self, tag: str, target_lang: str | None) -> str:
        """The tag to prepend: `tag`, or the one `target_lang` stands for."""
        if tag and target_lang:
            raise ConfigError("give tag or target_lang, not both")
        if not target_lang:
            return tag
        from translator.artifacts import model_tags
        from translator.constants import language_tag

        return language_tag(target_lang, model_tags(self.path))

    def _translator(self, settings: dict, tag: str) -> Translator:
        """The `Translator` of these search settings and tag, built on first use."""
        from translator.engines import load_translator
        from translator.search.config import SearchConfig

        fields = {field.name for field in dataclasses.fields(SearchConfig)}
        unknown = sorted(set(settings) - fields)
        if unknown:
            raise ConfigError(
                f"unknown search setting(s) {', '.join(unknown)}; SearchConfig has "
                f"{', '.join(sorted(fields))}"
            )
        config = SearchConfig(**settings)
        key = (config, tag)
        translator = self._translators.pop(key, None)
        if translator is None:
            options = dataclasses.replace(self.options, tag=tag)
            translator = load_translator(self.path, config, options).translator
        self._translators[key] = translator  # the most recently used last
        while len(self._translators) > KEPT_SEARCHES:
            del self._translators[next(iter(self._translators))]
        return translator


def load(
    path: str | os.PathLike[str],
    *,
    engine: str = "auto",
    precision: str = "model",
    batch_tokens: int | None = None,
    max_source_length: int | None = None,
    split: bool = True,
    source_lang: str = "",
) -> Model:
    """Loads a model to translate with, as `translator translate --model` takes it.

    A run directory, a model directory or a CTranslate2 export.

    Args:
        path: The directory.
        engine: "auto" (CTranslate2 for its exports, else ours), "tensorflow" or
            "ctranslate2", as `--engine`.
        precision: What our search computes in, as `--precision`.
        batch_tokens: Source tokens per batch (default: the commands').
        max_source_length: A longer source is split again to fit this many tokens, and
            its pieces' translations rejoined (default: the model's limit).
        split: A string is a paragraph: its sentences are translated apart and rejoined
            with the whitespace between them; False: it is one segment, as
            `translator translate --no-split`.
        source_lang: The language whose rules find the sentences (default: the one the
            model's record states), as `--source-lang`.

    Returns:
        The `Model`; its searches are built when first used.

    Raises:
        ModelDirError: the directory is not a model (the message says what is missing).
        ConfigError: an option the engine does not take.
    """
    from translator.engines import InferenceOptions, check_model

    check_model(path, engine)  # fails before TensorFlow starts
    options = InferenceOptions(
        engine=engine, precision=precision, split=split, source_lang=source_lang
    )
    if batch_tokens is not None:
        options = dataclasses.replace(options, batch_tokens=batch_tokens)
    if max_source_length is not None:
        options = dataclasses.replace(options, max_source_length=max_source_length)
    return Model(Path(path), options)
