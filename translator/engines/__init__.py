"""What runs a search, behind one seam: our TensorFlow search or CTranslate2.

    from translator.engines import InferenceOptions, load_translator

    loaded = load_translator("runs/m30k", SearchConfig(beam_size=4), InferenceOptions())
    loaded.translator.translate(["A man is riding a bike."])

Only `base` and `loading` are imported here; the others load when used.
"""

from translator.engines.base import (
    CTRANSLATE2_QUANTIZATIONS,
    ENGINES,
    BatchDecoder,
    InferenceOptions,
    LoadedModel,
)
from translator.engines.loading import (
    LoadedTranslator,
    check_model,
    load_translator,
    uses_ctranslate2,
)

__all__ = [
    "CTRANSLATE2_QUANTIZATIONS",
    "ENGINES",
    "BatchDecoder",
    "InferenceOptions",
    "LoadedModel",
    "LoadedTranslator",
    "check_model",
    "load_translator",
    "uses_ctranslate2",
]
