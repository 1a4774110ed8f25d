"""HTML pages through the server: the `html` signature, the server's own.

`translator translate --format html` reads a page into blocks, translates each block's
text with its word alignment and puts the markup back by it (`translator.markup`). The
server does the same for each string of an `html` request: the blocks of the request's
pages go to the export's `aligned` signature as one request (split into sentences as any
request's strings are, and batched with other requests'), and each page comes back
rendered, with what was repaired in it.

The signature is computed here, not in the SavedModel (a graph has no HTML parser), so
TF Serving serving the same export has no `html`. `translator serve` lists it in its
metadata beside the export's (`signature_def`), so that clients find it as they find
those; its tensor names name no tensor of the graph.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence

import numpy as np

from serving.model import SignatureInfo
from serving.protocol import Row
from translator.markup import Page, parse_html
from translator.signatures import INPUTS_KEY

# The server's signature: HTML pages in, the pages translated out.
HTML_SIGNATURE = "html"
# Its outputs: each page translated, and what was repaired in it as a browser reads it
# (phrases joined by "; ", "" for a well-formed page). Sorted, as TF Serving orders them.
TRANSLATIONS_KEY = "translations"
REPAIRS_KEY = "repairs"
HTML_INFO = SignatureInfo(input_keys=(INPUTS_KEY,), output_keys=(REPAIRS_KEY, TRANSLATIONS_KEY))

# Queues texts on the `aligned` signature: a future of its outputs, one row per text.
SubmitAligned = Callable[[list[Row]], concurrent.futures.Future]


def html_signature_def():
    """The `SignatureDef` of `html` for the metadata: string vectors [batch] in and out."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import meta_graph_pb2

    signature = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    for key, tensors in (
        (INPUTS_KEY, signature.inputs),
        (REPAIRS_KEY, signature.outputs),
        (TRANSLATIONS_KEY, signature.outputs),
    ):
        tensor = tensors[key]
        tensor.name = f"{HTML_SIGNATURE}_{key}"  # the server's, not a tensor of the graph
        tensor.dtype = types_pb2.DT_STRING
        tensor.tensor_shape.dim.add(size=-1)
    return signature


def submit_pages(pages: Sequence[Row], submit_aligned: SubmitAligned) -> concurrent.futures.Future:
    """Translates HTML pages, their markup kept.

    Args:
        pages: The request's strings, each a page (or fragment) of UTF-8 HTML.
        submit_aligned: Queues the blocks' texts on the `aligned` signature.

    Returns:
        A future of `translations` and `repairs` (bytes), [pages] each.
    """
    parsed = [parse_html(_bytes(page).decode("utf-8")) for page in pages]
    texts = [block.text for page in parsed for block in page.blocks]
    # A block without text (an image alone, say) stays without: the model is not asked.
    asked = [index for index, text in enumerate(texts) if text.strip()]
    outer: concurrent.futures.Future = concurrent.futures.Future()
    if not asked:
        outer.set_result(_rendered(parsed, [""] * len(texts), [""] * len(texts)))
        return outer
    inner = submit_aligned([texts[index].encode("utf-8") for index in asked])

    def done(future: concurrent.futures.Future) -> None:
        try:
            outputs = future.result()
            translations, alignments = [""] * len(texts), [""] * len(texts)
            for row, index in enumerate(asked):
                translations[index] = outputs["translations"][row].decode("utf-8")
                alignments[index] = outputs["alignments"][row].decode("utf-8")
            outer.set_result(_rendered(parsed, translations, alignments))
        except Exception as error:  # the model's failure, or the rendering's
            outer.set_exception(error)

    inner.add_done_callback(done)
    return outer


def _bytes(row: Row) -> bytes:
    return row[0] if isinstance(row, tuple) else row


def _rendered(
    pages: list[Page], translations: list[str], alignments: list[str]
) -> dict[str, np.ndarray]:
    """Each page with its blocks' translations, in the order of the blocks' texts."""
    rendered = np.empty(len(pages), dtype=object)
    repairs = np.empty(len(pages), dtype=object)
    start = 0
    for row, page in enumerate(pages):
        end = start + len(page.blocks)
        rendered[row] = page.render(translations[start:end], alignments[start:end]).encode()
        repairs[row] = "; ".join(page.repairs).encode("utf-8")
        start = end
    return {TRANSLATIONS_KEY: rendered, REPAIRS_KEY: repairs}
