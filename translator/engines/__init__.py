"""What runs a search, behind one seam: our TensorFlow search or CTranslate2.

    from translator.engines import InferenceOptions, load_translator

    loaded = load_translator("runs/m30k", SearchConfig(beam_size=4), InferenceOptions())
    loaded.translator.translate(["A man is riding a bike."])

Modules:
    base                 `InferenceOptions`, and the `BatchDecoder` and `LoadedModel`
                         protocols both engines implement (TensorFlow-free)
    loading              `load_translator`: a model directory or an export, loaded and
                         warmed up into a `translator.inference.Translator`
    search_cache         our traced search saved beside the model, restored by later loads
    ctranslate2_files    the CTranslate2 export's layout (what makes a directory one)
    ctranslate2_export   the converter: our weights as CTranslate2's `TransformerSpec`
    ctranslate2_runtime  the loaded export and its `CTranslate2Decoder`

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
