"""Dynamic batching: sentences of concurrent requests decoded together by one worker thread.

The parameters have TF Serving's names and meaning (`batching_parameters.txt`):

- `max_batch_size`: sentences per model call. A request with more sentences is split
  over several batches (as TF Serving splits one with `enable_large_batch_splitting`,
  where this is `max_execution_batch_size`); its response waits for all of them.
- `batch_timeout_micros`: how long a batch may wait for more sentences, counted from
  when its first sentence is queued or, if the worker was busy then, from when the
  worker became free. The second case differs from TF Serving on purpose: with one
  worker and clients that send their next request as soon as they have an answer, the
  clients answered by one batch would otherwise always miss the next one (it starts at
  once with whatever queued meanwhile), and batches would settle at half the clients.
  A request that is alone is not held at all (adaptive batching, not in TF Serving):
  alone means the only one queued, with nothing running, while the last batch served a
  single request or ended more than a timeout ago. A lone client (or light traffic) then
  waits for nothing but its own decoding, as with batching off; under load the batches
  hold several requests, and the timeout gathers the next one as above.
- `max_enqueued_batches`: the queue holds at most this many full batches of sentences;
  beyond that a request is refused at once (`QueueFullError`, HTTP 503) instead of
  waiting without bound.
- `num_batch_threads` is 1 here: one worker thread runs the model (TensorFlow already
  spreads one call over every core).

Batches are formed in arrival order (FIFO) from requests for the same signature; the
oldest request's signature goes first. With batching disabled, each request is one
model call, whole and alone, in arrival order.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from serving.config import BatchingConfig
from serving.protocol import Row
from translator.errors import ConfigError

logger = logging.getLogger(__name__)

# Runs one signature on a batch: (signature, sentences) -> arrays by output key, one row
# per sentence. A sentence is opaque here (`serving.protocol.Row`).
RunFunction = Callable[[str, Sequence[Row]], dict[str, np.ndarray]]


class QueueFullError(RuntimeError):
    """The batching queue is full; the request was not queued."""


class BatcherStoppedError(RuntimeError):
    """The batcher is stopped (the server is shutting down)."""


@dataclasses.dataclass
class BatchStats:
    """Counts since start (read without a lock: for logs and benchmarks)."""

    batches: int = 0
    sentences: int = 0
    requests: int = 0
    rejected: int = 0
    failed_batches: int = 0
    # Batch size -> number of batches of that size.
    sizes: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def mean_batch_size(self) -> float:
        """Sentences per model call."""
        return self.sentences / self.batches if self.batches else 0.0


class _Task:
    """One request: its sentences, how many are dispatched, and its collected outputs."""

    def __init__(self, signature: str, inputs: Sequence[Row], enqueued: float):
        self.signature = signature
        self.inputs = list(inputs)
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.enqueued = enqueued
        self.dispatched = 0  # sentences handed to batches so far
        self.delivered = 0  # sentences whose outputs came back
        self.chunks: list[dict[str, np.ndarray]] = []

    def deliver(self, outputs: dict[str, np.ndarray]) -> None:
        """Adds the outputs of the next chunk (chunks come back in order)."""
        self.chunks.append(outputs)
        self.delivered += len(next(iter(outputs.values())))
        if self.delivered == len(self.inputs) and not self.future.done():
            if len(self.chunks) == 1:
                result = self.chunks[0]
            else:
                result = {k: np.concatenate([c[k] for c in self.chunks]) for k in outputs}
            self.future.set_result(result)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class Batcher:
    """Groups sentences of concurrent requests into model calls on one worker thread.

    Args:
        run: Runs one signature on a batch of sentences.
        config: The batching parameters.
        clock: Seconds from an arbitrary origin, for the timeouts (tests pass a simulated
            one; the waits themselves stay real, ended by requests or the deadline).
    """

    def __init__(
        self,
        run: RunFunction,
        config: BatchingConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._run = run
        self._clock = clock
        self.config = config or BatchingConfig()
        self.stats = BatchStats()
        self._queue: collections.deque[_Task] = collections.deque()
        self._waiting: collections.Counter = collections.Counter()  # signature -> sentences
        self._condition = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        # When the worker finished its last batch (monotonic seconds).
        self._free_since = 0.0
        # Requests the last batch served: 1 (or 0, none yet) means light traffic.
        self._last_requests = 0

    def start(self) -> None:
        """Starts the worker thread."""
        self._thread = threading.Thread(target=self._work, name="batcher", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """The worker thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> bool:
        """Finishes the queued requests, then stops the worker thread.

        Returns:
            Whether the thread ended within `timeout` seconds.
        """
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def submit(self, signature: str, inputs: Sequence[Row]) -> concurrent.futures.Future:
        """Queues a request.

        Args:
            signature: The signature to run.
            inputs: Its sentences (at least one).

        Returns:
            A future of the outputs by key, one row per sentence, in order.

        Raises:
            QueueFullError: the queue has no room for these sentences.
            BatcherStoppedError: the batcher is stopping.
        """
        if not inputs:
            raise ValueError("a request needs at least one sentence")
        task = _Task(signature, inputs, self._clock())
        with self._condition:
            if self._stopping or not self.alive:
                raise BatcherStoppedError("the server is shutting down")
            waiting = sum(self._waiting.values())
            if waiting and waiting + len(inputs) > self.config.queue_capacity:
                self.stats.rejected += 1
                raise QueueFullError(
                    f"the batching queue is full ({waiting} sentences waiting, capacity "
                    f"{self.config.queue_capacity} = max_enqueued_batches "
                    f"{self.config.max_enqueued_batches} x max_batch_size "
                    f"{self.config.max_batch_size}); retry later"
                )
            self._queue.append(task)
            self._waiting[signature] += len(inputs)
            self.stats.requests += 1
            self._condition.notify_all()
        return task.future

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._run_batch(*batch)
            self._free_since = self._clock()

    def _next_batch(self) -> tuple[str, list[tuple[_Task, int, int]]] | None:
        """Waits for the next batch: (signature, [(task, start, end)]); None to stop."""
        config = self.config
        with self._condition:
            while not self._queue and not self._stopping:
                self._condition.wait()
            if not self._queue:
                return None  # stopping, and nothing left to do
            head = self._queue[0]
            if not config.enabled:
                self._queue.popleft()
                self._waiting[head.signature] -= len(head.inputs)
                return head.signature, [(head, 0, len(head.inputs))]
            timeout = config.batch_timeout_micros / 1e6
            deadline = max(head.enqueued, self._free_since) + timeout
            if self._alone(timeout):
                deadline = 0.0  # nobody to wait for
            while (
                not self._stopping
                and self._waiting[head.signature] < config.max_batch_size
                and (remaining := deadline - self._clock()) > 0
            ):
                self._condition.wait(remaining)
            parts, size = [], 0
            for task in list(self._queue):
                if task.signature != head.signature:
                    continue
                take = min(len(task.inputs) - task.dispatched, config.max_batch_size - size)
                parts.append((task, task.dispatched, task.dispatched + take))
                task.dispatched += take
                size += take
                if task.dispatched == len(task.inputs):
                    self._queue.remove(task)
                if size == config.max_batch_size:
                    break
            self._waiting[head.signature] -= size
            self._last_requests = len(parts)
            return head.signature, parts

    def _alone(self, timeout: float) -> bool:
        """Whether the head of the queue is alone: the only request, in light traffic.

        Light traffic: the last batch served at most one request, or the worker has been
        idle for longer than the timeout. (Called with the lock held, the worker idle.)
        """
        if len(self._queue) != 1:
            return False
        idle = self._clock() - self._free_since
        return self._last_requests <= 1 or idle > timeout

    def _run_batch(self, signature: str, parts: list[tuple[_Task, int, int]]) -> None:
        inputs = [s for task, start, end in parts for s in task.inputs[start:end]]
        try:
            outputs = self._run(signature, inputs)
        except Exception as error:  # reported to every request of the batch
            logger.exception("batch of %d sentences failed", len(inputs))
            self.stats.failed_batches += 1
            for task, _, _ in parts:
                task.fail(error)
            return
        self.stats.batches += 1
        self.stats.sentences += len(inputs)
        self.stats.sizes[len(inputs)] += 1
        offset = 0
        for task, start, end in parts:
            count = end - start
            task.deliver({k: v[offset : offset + count] for k, v in outputs.items()})
            offset += count


# Fields of TF Serving's BatchingParameters this server applies; the others are reported.
_APPLIED_FIELDS = (
    "max_batch_size",
    "batch_timeout_micros",
    "max_enqueued_batches",
    "enable_large_batch_splitting",
    "max_execution_batch_size",
)


def read_batching_parameters(path: str | os.PathLike[str]) -> tuple[dict[str, int], list[str]]:
    """Reads TF Serving's batching parameters file (a text `BatchingParameters` proto).

    Parsed by the message's schema (`serving.protos`), as TF Serving parses it, and read
    as TF Serving reads it: `max_batch_size` is the largest request (a larger one is
    refused); with `enable_large_batch_splitting` a request is split over model calls of
    at most `max_execution_batch_size` sentences (default: `max_batch_size`), without it
    `max_batch_size` is the largest model call too, so no request is ever split.

    Returns:
        `(applied, ignored)`: the values the file sets, by `translator serve` option
        (`max_batch_size`: sentences per model call; `max_request_sentences`: the largest
        request; `batch_timeout_micros`, `max_enqueued_batches`), and the names of the
        fields set that this server does not use (such as `num_batch_threads`; it runs one
        batch thread).

    Raises:
        ConfigError: naming the file, and the line and column TF Serving would reject, or
            the fields that contradict each other.
    """
    from serving.protos import read_batching_parameters as read_proto

    present = {field.name: value for field, value in read_proto(path).ListFields()}
    ignored = [name for name in present if name not in _APPLIED_FIELDS]
    applied = {
        name: int(present[name].value)
        for name in ("batch_timeout_micros", "max_enqueued_batches")
        if name in present
    }
    if "max_batch_size" in present:
        applied["max_request_sentences"] = applied["max_batch_size"] = int(
            present["max_batch_size"].value
        )
    splitting = "enable_large_batch_splitting" in present and bool(
        present["enable_large_batch_splitting"].value
    )
    if "max_execution_batch_size" in present and not splitting:
        ignored.append("max_execution_batch_size (enable_large_batch_splitting is off)")
    elif "max_execution_batch_size" in present:
        applied["max_batch_size"] = int(present["max_execution_batch_size"].value)
        largest = applied.get("max_request_sentences")
        if largest is not None and applied["max_batch_size"] > largest:
            # As TF Serving: input_batch_size_limit >= max_execution_batch_size.
            raise ConfigError(
                f"{path}: max_execution_batch_size ({applied['max_batch_size']}) is larger "
                f"than max_batch_size ({largest}), the largest request; with "
                "enable_large_batch_splitting it must not be"
            )
    return applied, ignored
