"""The page `translator serve` shows at `/`: a form to try the model in a browser.

The page (`page.html` beside this file) is static; it calls the server's own REST API,
so it shows exactly what any other client gets. This module fills in what it needs to
know of the served model: its name and version, which signature to call, the n-best
size, the tags it takes, whether a line is a paragraph, and whether it takes HTML.
"""

from __future__ import annotations

import json
import urllib.parse
from functools import cache
from importlib import resources

from serving.markup import HTML_SIGNATURE
from serving.model import ServedModel
from serving.service import Predictor
from translator.signatures import N_BEST_SIGNATURE, SERVING_SIGNATURE

# Where page.html receives its config (a JSON object).
_CONFIG_MARK = "__CONFIG__"


@cache
def _template() -> str:
    return resources.files("serving").joinpath("page.html").read_text("utf-8")


def page_config(predictor: Predictor) -> dict[str, object]:
    """What the page needs to know of the served model.

    The n-best signature when the export has it (the page shows the list with scores),
    else `serving_default`; the tagged twin of that signature and the model's tags, when
    it has them, for the page's tag menu; the `html` signature, when served, for its
    HTML mode.
    """
    model = predictor.model
    signature = N_BEST_SIGNATURE if N_BEST_SIGNATURE in model.signatures else SERVING_SIGNATURE
    tagged = model.tagged(signature)
    name = urllib.parse.quote(model.name, safe="")
    return {
        "name": model.name,
        "version": str(model.version),
        "predict_url": f"/v1/models/{name}/versions/{model.version}:predict",
        "signature": signature,
        "n_best": _n_best_size(model, signature),
        "tagged_signature": tagged,
        "tags": list(model.tags) if tagged else [],
        "paragraphs": predictor.splitting is not None,
        "html_signature": HTML_SIGNATURE if HTML_SIGNATURE in predictor.signatures else None,
    }


def render_page(predictor: Predictor) -> str:
    """The page's HTML for the served model."""
    config = json.dumps(page_config(predictor))
    # Inside <script>, "</" would end the element early: JSON allows "<\/" for it.
    return _template().replace(_CONFIG_MARK, config.replace("</", "<\\/"))


def _n_best_size(model: ServedModel, signature: str) -> int:
    """The n-best lists' width of `signature` (0 for one translation per sentence)."""
    outputs = model.signature_defs.get(signature, {}).get("outputs", {})
    dims = outputs.get("scores", {}).get("tensor_shape", {}).get("dim", [])
    return int(dims[1].get("size", 0)) if len(dims) == 2 else 0
