"""Where measured speeds are kept, and what they are kept under.

A speed is cached (`SpeedCache`: the run's `speed.json`, then the machine's) under a
signature of the machine, precision, strategy, vocabulary sizes and corpus lengths
(`machine_signature`): a timing is taken once and reused by every later plan with the
same signature. Beside them, the share of their timing's pace that runs sustained
(`sustained.json`), one list per machine and kind of timing (`sustained_share`).
`training.planning.measure` plans on both.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import platform
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from training.config import RunConfig
from training.planning.rules import Shape, Speed
from translator.io import machine_cache_dir, write_atomic

if TYPE_CHECKING:
    from translator.pipelines.vocabulary import Vocabulary

log = logging.getLogger(__name__)

SPEED_FILE = "speed.json"
# The shares of their timings' pace that runs sustained, by machine (`sustained_share`).
SUSTAINED_FILE = "sustained.json"
# The last runs whose median share a plan takes (one run's share moves with its timing's
# noise: fresh processes' timings differ by up to 22% here, bench/RESULTS.md).
SUSTAINED_RUNS = 5
# The signature's entries that are the corpus' and the vocabulary's, not the machine's.
CORPUS_SIGNATURE = ("vocabulary_sizes", "mean_target_length", "max_lengths")


def machine_signature(
    config: RunConfig, vocabulary: Vocabulary, strategy, precision: str, mean_length: float
) -> dict:
    """What a speed measurement depends on: a cached one with another signature is stale.

    The corpus and the vocabulary enter through the mean target length (rounded) and the
    vocabulary sizes: tokens per second depend on those, not on which sentences or
    pieces they are.
    """
    return {
        "processor": _processor(),
        **strategy.describe_devices(),
        "precision": precision,
        "replicas": strategy.num_replicas_in_sync,
        "vocabulary_sizes": [vocabulary.source_vocab_size, vocabulary.target_vocab_size],
        "mean_target_length": round(mean_length),
        "max_lengths": [
            config.data.pipeline.max_source_length,
            config.data.pipeline.max_target_length,
        ],
        # A prepared corpus is batched in Python, text through tf.data.
        **({"input": "prepared"} if config.data.prepared else {}),
        # Subword sampling's draws (in Python) take time from the training step.
        **({"subword_nbest": nbest} if (nbest := config.data.pipeline.subword_nbest) > 1 else {}),
    }


def _processor() -> str:
    """The CPU as its speeds depend on it (`describe_processor` of /proc/cpuinfo)."""
    lines = []
    try:  # the first CPU's block only: the kernel writes the file a CPU at a time, as read
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            lines = list(itertools.takewhile(str.strip, cpuinfo))
    except OSError:
        pass
    text = "".join(lines)
    described = describe_processor(text, os.environ.get("ONEDNN_MAX_CPU_ISA", ""))
    return f"{described or platform.processor() or platform.machine()} x{os.cpu_count()}"


def describe_processor(cpuinfo: str, isa_cap: str = "") -> str:
    """The first CPU of a /proc/cpuinfo text: its name, family, model and widest vectors.

    A virtual machine's name alone can hide its generation ("AMD EPYC" for a CPU with
    AVX2 only and for one with AVX-512, 4x apart in training speed): a speed cached on
    one must not be read on the other. A cap on oneDNN's instructions (its
    `ONEDNN_MAX_CPU_ISA`) is another machine too. "" where the text names no CPU.
    """
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block only
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    if "model name" not in fields:
        return ""
    flags = set(fields.get("flags", "").split())
    widest = next((isa for isa in ("avx512f", "avx2", "avx") if isa in flags), "")
    details = [
        f"family {fields['cpu family']} model {fields['model']}" if "cpu family" in fields else "",
        {"avx512f": "AVX-512"}.get(widest, widest.upper()),
        f"oneDNN capped at {isa_cap}" if isa_cap else "",
    ]
    details = [detail for detail in details if detail]
    return fields["model name"] + (f" ({', '.join(details)})" if details else "")


def machine_cache_path() -> Path:
    """Where speeds are shared across work directories on this machine (`speed.json`)."""
    return machine_cache_dir() / SPEED_FILE


def _machine_key(signature: dict, in_turn: bool = False) -> str:
    """A speed's signature less its corpus and vocabulary: what a sustained share depends on.

    With the kind of timing: a shape's own (the key of the shares recorded before kinds)
    or one in turn (`Speed.in_turn`).
    """
    machine = {name: value for name, value in signature.items() if name not in CORPUS_SIGNATURE}
    if in_turn:
        machine["timing"] = "in turn"
    return json.dumps(machine, sort_keys=True)


def sustained_share(signature: dict, in_turn: bool = False) -> tuple[float, int]:
    """The share of their timings' pace that runs here trained at, and over how many runs.

    The median of the last `SUSTAINED_RUNS` runs of the machine, precision and strategy of
    `signature` (any corpus: `learn_speed` records them) whose plans counted the same kind
    of timing (`in_turn`: the vocabulary's split, warm; else a shape's own, cold); (1.0, 0)
    before any.
    """
    shares = _read_json(machine_cache_dir() / SUSTAINED_FILE).get(
        _machine_key(signature, in_turn), []
    )
    if not isinstance(shares, list):
        shares = []
    shares = [share for share in shares if isinstance(share, int | float) and share > 0]
    shares = shares[-SUSTAINED_RUNS:]
    return (float(statistics.median(shares)), len(shares)) if shares else (1.0, 0)


def record_sustained(signature: dict, share: float, in_turn: bool = False) -> None:
    """Adds a run's sustained share to the machine's (`sustained_share`), the last few kept."""
    path = machine_cache_dir() / SUSTAINED_FILE
    try:  # a cache that cannot be written (read-only home) only leaves timings as read
        shares, key = _read_json(path), _machine_key(signature, in_turn)
        kept = shares.get(key)
        kept = kept if isinstance(kept, list) else []
        shares[key] = [*kept, round(share, 4)][-SUSTAINED_RUNS:]
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(shares, indent=2))
    except OSError as error:
        log.warning("plan: cannot write %s: %s", path, error)


class SpeedCache:
    """Measured speeds under one signature: the run's `speed.json`, then the machine's.

    A run reads its own file first, then the machine's cache (`machine_cache_path`), so a
    new work directory on the same machine, with a corpus of the same mean length and a
    vocabulary of the same size, measures nothing. Measurements go to both.
    """

    def __init__(
        self, path: Path, signature: dict, shared: Path | None = None, *, read: bool = True
    ):
        self.path, self.signature, self.shared = path, signature, shared
        self.name = json.dumps(signature, sort_keys=True)
        own = _read_json(path) if read else {}
        self.speeds: dict[str, dict] = (
            own.get("speeds", {}) if own.get("signature") == signature else {}
        )
        self.machine: dict[str, dict] = (
            _read_json(shared).get(self.name, {}) if shared and read else {}
        )

    @staticmethod
    def key(shape: Shape, batch_tokens: int, output: int | None = None) -> str:
        """The entry of one shape at one batch size (with a smaller vocabulary's `output`)."""
        # Equal depths keep the key of the cache files written before students.
        depth = str(shape.encoder_layers)
        if shape.decoder_layers != shape.encoder_layers:
            depth = shape.depth
        return (
            f"{shape.preset}:{depth}x{shape.d_model}:ffn{shape.ffn_dim}:"
            f"h{shape.num_heads}@{batch_tokens}" + (f":v{output}" if output else "")
        )

    def get(self, shape: Shape, batch_tokens: int, output: int | None = None) -> Speed | None:
        """The cached speed, or None."""
        key = self.key(shape, batch_tokens, output)
        entry = self.speeds.get(key) or self.machine.get(key)
        return Speed(**entry) if entry else None

    def seed(self, known: tuple[tuple[str, Speed], ...]) -> None:
        """Speeds known without a timing (`resized_speeds`), by entry, where none is cached.

        Held for this plan; written with the next measurement.
        """
        for key, speed in known:
            if key not in self.speeds and key not in self.machine:
                self.speeds[key] = dataclasses.asdict(speed)

    def put(self, shape: Shape, batch_tokens: int, speed: Speed, output: int | None = None) -> None:
        """Records a measurement in the run's file and the machine's cache."""
        self.speeds[self.key(shape, batch_tokens, output)] = dataclasses.asdict(speed)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(
            self.path, json.dumps({"signature": self.signature, "speeds": self.speeds}, indent=2)
        )
        if self.shared is None:
            return
        try:  # a cache that cannot be written (read-only home) only costs a measurement
            shared = _read_json(self.shared)
            shared.setdefault(self.name, {}).update(self.speeds)
            self.shared.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.shared, json.dumps(shared, indent=2))
        except OSError as error:
            log.warning("plan: cannot write the speed cache %s: %s", self.shared, error)


def resized_speeds(cache_dir: Path, shape: Shape, speedup: float) -> tuple[tuple[str, Speed], ...]:
    """`shape`'s speeds cached in `cache_dir` by the last plan, times `speedup`.

    The recipe builds its vocabulary again where the budget takes a smaller size; the
    plan that chose it had just timed the shape at the old size and, in turn, at a
    smaller one (their line gives `speedup`). Training's plan, on the new vocabulary (a
    new signature), reads these rather than timing the shape a third time: on a slow CPU
    each timing's start alone is 35 to 40 s of a 5-minute budget (bench/RESULTS.md,
    "Vocabulary by the budget").

    Returns:
        `(cache entry, speed)` pairs for `SpeedCache.seed`.
    """
    speeds = _read_json(cache_dir / SPEED_FILE).get("speeds", {})
    known = []
    for key, entry in speeds.items():
        speed = Speed(**entry)
        if key == SpeedCache.key(shape, speed.batch_tokens):  # (not a smaller size's)
            rate = speed.tokens_per_second * speedup
            known.append((key, dataclasses.replace(speed, tokens_per_second=rate)))
    return tuple(known)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
