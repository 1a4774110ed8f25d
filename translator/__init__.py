"""translator: train, evaluate, export and serve Transformer translation models on Keras 3.

    import translator
    model = translator.load("runs/multi30k/run")
    model.translate(["A man is riding a bike."])

The public API is imported lazily, so `import translator` (and `translator --help`) stays
fast and does not start TensorFlow until a model is actually used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Model", "Transformer", "TransformerConfig", "__version__", "load"]

if TYPE_CHECKING:  # pragma: no cover
    from translator.api import Model, load
    from translator.config import TransformerConfig
    from translator.model import Transformer

_LAZY = {
    "load": "translator.api",
    "Model": "translator.api",
    "Transformer": "translator.model",
    "TransformerConfig": "translator.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'translator' has no attribute {name!r}")
