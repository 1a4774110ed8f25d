"""What REST and gRPC share: finding the servable, the request limits, `--tag`, the batcher.

Both front ends parse their own wire format into a signature name and sentences, then
call `Predictor.submit`; every check that does not depend on the wire format lives here,
so that both refuse the same requests with the same messages. Errors are `RequestError`s
with an HTTP status; the gRPC front end maps them to status codes (`serving.grpc_api`).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence

from serving.batching import Batcher, BatcherStoppedError, QueueFullError
from serving.markup import HTML_INFO, HTML_SIGNATURE, html_signature_def, submit_pages
from serving.model import ServedModel, SignatureInfo, as_json
from serving.protocol import RequestError, RequestLimits, Row, check_sentence_count, check_text
from serving.splitting import ALIGNMENTS_KEY, OUTPUT_KEYS, Splitting
from translator.signatures import ALIGNED_SIGNATURE, TAGS_KEY


class Predictor:
    """One served model behind its batcher, as both APIs reach it.

    Args:
        model: The served model.
        batcher: Runs predict requests in batches.
        limits: Request size limits.
        tag: What `serve --tag` gives every sentence of an untagged request ("": none):
            `serving_default` and `n_best` then run as `tagged` and `tagged_n_best`.
        splitting: How a request's strings are split into the segments the model runs
            (`serving.splitting`); None: each string runs as it is.
    """

    def __init__(
        self,
        model: ServedModel,
        batcher: Batcher,
        limits: RequestLimits,
        tag: str = "",
        splitting: Splitting | None = None,
    ):
        self.model = model
        self.batcher = batcher
        self.limits = limits
        self.tag = tag.encode("utf-8")
        self.splitting = splitting
        # What the server serves: the export's signatures, and `html` where the export
        # has `aligned` to compute it from (`serving.markup`).
        self.signatures: dict[str, SignatureInfo] = dict(model.signatures)
        # Their SignatureDefs, as messages (gRPC's metadata) and as JSON (REST's).
        self.signature_def_protos = dict(model.signature_def_protos)
        if ALIGNED_SIGNATURE in model.signatures:
            self.signatures[HTML_SIGNATURE] = HTML_INFO
            self.signature_def_protos[HTML_SIGNATURE] = html_signature_def()
        self.signature_defs = as_json(self.signature_def_protos)
        # The input keys of each servable signature, by signature name.
        self.input_keys = {name: info.input_keys for name, info in self.signatures.items()}

    def find(self, name: str, version: str | None = None, label: str | None = None) -> None:
        """Checks that a request's model spec names this model, as TF Serving checks it.

        Raises:
            RequestError: 404 with TF Serving's message, e.g. `Servable not found for
                request: Latest(other)`; 400 for a version label (none is given here).
        """
        spec = f"Specific({name}, {version})" if version else f"Latest({name})"
        if label:  # this server gives its version no label
            raise RequestError(f"Unrecognized servable version label: {label}", 400)
        if name != self.model.name or (version is not None and version != str(self.model.version)):
            raise RequestError(f"Servable not found for request: {spec}", 404)

    def submit(self, signature: str, inputs: Sequence[Row]) -> concurrent.futures.Future:
        """Checks a parsed request and queues it.

        Args:
            signature: A key of `input_keys`.
            inputs: The sentences, as `serving.protocol.Row`s.

        Returns:
            The batcher's future: numpy arrays by output key, one row per sentence.

        Raises:
            RequestError: too many sentences (413), a string that is not UTF-8 or an
                unknown tag (400), or a full queue or a stopping server (503).
        """
        check_sentence_count(len(inputs), self.limits)
        check_text(inputs)
        if signature == HTML_SIGNATURE:  # the pages' blocks, as one `aligned` request
            return submit_pages(inputs, lambda texts: self._queue(ALIGNED_SIGNATURE, texts))
        return self._queue(*self.tagged(signature, list(inputs)))

    def _queue(self, signature: str, rows: list[Row]) -> concurrent.futures.Future:
        """Queues checked rows of an export's signature, split into segments if asked."""
        planned = None
        outputs = set(self.model.signatures[signature].output_keys)
        if self.splitting is not None and outputs - {ALIGNMENTS_KEY} == set(OUTPUT_KEYS):
            planned = self.splitting.plan(rows, self.model.signatures[signature].input_keys)
            rows = planned.rows
        try:
            future = self.batcher.submit(signature, rows)
        except (QueueFullError, BatcherStoppedError) as error:
            raise RequestError(str(error), 503) from None
        return future if planned is None else planned.rejoined(future)

    def tagged(self, signature: str, inputs: list[Row]) -> tuple[str, list[Row]]:
        """The signature and sentences to run: `--tag` applied, every tag checked.

        Raises:
            RequestError: a tag the model does not know (400), before it is batched with
                other requests' sentences, whose calls it would fail.
        """
        tagged = self.model.tagged(signature)
        if self.tag and tagged is not None:
            signature, inputs = tagged, [(row, self.tag) for row in inputs]
        keys = self.model.signatures[signature].input_keys
        if TAGS_KEY in keys:
            at = keys.index(TAGS_KEY)
            for index, row in enumerate(inputs):
                assert isinstance(row, tuple)  # a signature of several inputs
                why = self.model.unknown_tag(row[at])
                if why is not None:
                    raise RequestError(f"sentence {index}: {why}")
        return signature, inputs
