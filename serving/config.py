"""`BatchingConfig`: the dynamic batching parameters, apart from the batcher; the request limit.

Kept free of heavy imports: `translator --help` reads the defaults through
`serving.cli` on every start.
"""

from __future__ import annotations

import dataclasses

from translator.errors import ConfigError

# Most sentences in one request; a larger one is refused (413). TF Serving's max_batch_size
# with enable_large_batch_splitting (batching_parameters.txt), which is what clients such
# as `serving.client` split their input by.
MAX_REQUEST_SENTENCES = 128


@dataclasses.dataclass(frozen=True)
class BatchingConfig:
    """Batching parameters (TF Serving's names).

    A request with more than `max_batch_size` sentences is split over several model calls,
    as TF Serving splits one with `enable_large_batch_splitting`; `max_batch_size` here is
    then TF Serving's `max_execution_batch_size` (`serving.batching.read_batching_parameters`
    maps the file's fields).
    """

    # Most sentences in one model call.
    max_batch_size: int = 32
    # Longest wait for a batch to fill once its first sentence is queued, microseconds
    # (see batching_parameters.txt for why 10 ms).
    batch_timeout_micros: int = 10000
    # Queue capacity, in full batches; a request that would exceed it is refused.
    max_enqueued_batches: int = 100
    # False: every request is run alone as one batch (no merging, no splitting).
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.batch_timeout_micros < 0:
            raise ConfigError(f"batch_timeout_micros must be >= 0, got {self.batch_timeout_micros}")
        if self.max_enqueued_batches < 1:
            raise ConfigError(f"max_enqueued_batches must be >= 1, got {self.max_enqueued_batches}")

    @property
    def queue_capacity(self) -> int:
        """Most sentences waiting at once."""
        return self.max_enqueued_batches * self.max_batch_size
