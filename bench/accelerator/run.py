"""`run`: on the accelerator, with no TensorFlow: measure, plan, train, decode, score.

Reads the bundle `prepare` wrote and writes `accelerator.json` into `--out`. Every shape a
step meets is compiled before the training clock starts (the compiles run side by side
in threads: XLA releases the GIL), so `--minutes` are minutes of updates.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import keras
import numpy as np
import sentencepiece

from bench import harness
from bench.accelerator import EVAL_FILE, MANIFEST, RESULTS_FILE, bundle_file
from training.config import RunConfig, load_config
from training.jax_step import JaxTrainer
from training.optimizer import make_optimizer, make_schedule
from training.plan import (
    SHAPES,
    Budget,
    CorpusCounts,
    Shape,
    Speed,
    batch_tokens_in_memory,
    make_plan,
)
from training.planning import TIMED_BATCH_TOKENS, scaled_speed, with_shape
from translator import flops
from translator.constants import EOS_ID
from translator.evaluation.scoring import score_corpus
from translator.model import Transformer
from translator.search import JaxDecoder, SearchConfig

# The precision of training (the search runs in float32, as `translate` does by default).
POLICY = "mixed_bfloat16"
# Seconds of updates per speed measurement (after one untimed update per shape).
MEASURE_SECONDS = 6.0
# Updates between two looks at the clock (each look waits for the device).
CHECK_EVERY = 20
# Sentences decoded per call: one compiled search for validation and test alike.
DECODE_ROWS = 1024


@dataclasses.dataclass
class Batches:
    """One epoch of training batches at one batch size, on the device."""

    # Per batch, in tf.data's order: ({"source_ids", "decoder_input_ids"}, labels).
    batches: list
    # Per batch: real source and target tokens per row (for FLOPs), int64 [rows].
    lengths: list[tuple[np.ndarray, np.ndarray]]

    @classmethod
    def load(cls, path: Path) -> Batches:
        arrays = np.load(path)
        batches, lengths = [], []
        for length, index in arrays["order"]:
            source, decoder, labels = (
                arrays[f"{length}/{name}"][index].astype(np.int32)
                for name in ("source", "decoder", "labels")
            )
            features = {"source_ids": source, "decoder_input_ids": decoder}
            batches.append(jax.device_put((features, labels)))
            lengths.append(((source > 0).sum(1), (labels > 0).sum(1)))
        return cls(batches, lengths)

    def shapes(self) -> dict[tuple[int, ...], int]:
        """The first batch of each distinct shape: {labels shape: batch index}."""
        first: dict[tuple[int, ...], int] = {}
        for index, (_, labels) in enumerate(self.batches):
            first.setdefault(tuple(labels.shape), index)
        return first

    def flops(self, config) -> np.ndarray:
        """Model training FLOPs of each batch over its real tokens (`translator.flops`)."""
        return np.array([flops.training_flops(config, s, t).sum() for s, t in self.lengths])

    def tokens(self) -> np.ndarray:
        """Real target tokens of each batch."""
        return np.array([float(t.sum()) for _, t in self.lengths])

    def order(self, epoch: int) -> np.ndarray:
        """Batch indices of an epoch: tf.data's order first, then seeded permutations."""
        if epoch == 0:
            return np.arange(len(self.batches))
        return np.random.default_rng(epoch).permutation(len(self.batches))


class Session:
    """A model, its optimizer and its step compiled for every batch shape it will meet.

    Args:
        model: The `Transformer` to train (its dtype policy is the training precision).
        config: The run config: the optimizer, its schedule and the loss.
        total_updates: Where the budgeted schedule ends, to begin with.
    """

    def __init__(self, model: Transformer, config: RunConfig, total_updates: float):
        self.model = model
        self.model_config = model.config
        if not model.built:
            model.build()
        d_model = self.model_config.d_model
        schedule = make_schedule(config, d_model)
        schedule.total_updates.assign(float(total_updates))
        self.trainer = JaxTrainer(
            model,
            make_optimizer(config, d_model, schedule),
            schedule,
            label_smoothing=config.optimizer.label_smoothing,
            clip_norm=config.optimizer.clip_norm,
        )
        self.state = self.trainer.state()
        self.steps: dict[tuple[int, ...], object] = {}

    @classmethod
    def of(cls, config: RunConfig, vocab_size: int, total_updates: float) -> Session:
        """A session of the config's model, new weights, in `POLICY`."""
        model = Transformer(config.model.transformer_config(vocab_size, vocab_size), dtype=POLICY)
        return cls(model, config, total_updates)

    def compile(self, batches: Batches) -> float:
        """Compiles the step for each new shape of `batches`; returns the seconds taken."""
        started = time.perf_counter()
        new = {s: i for s, i in batches.shapes().items() if s not in self.steps}
        lowered = {
            s: self.trainer.step.lower(self.state, batches.batches[i]) for s, i in new.items()
        }
        with concurrent.futures.ThreadPoolExecutor(max(len(lowered), 1)) as pool:
            futures = {s: pool.submit(program.compile) for s, program in lowered.items()}
        self.steps.update({s: future.result() for s, future in futures.items()})
        return time.perf_counter() - started

    def update(self, batch):
        """One update; returns its `StepResult` (not waited for)."""
        self.state, result = self.steps[tuple(batch[1].shape)](self.state, batch)
        return result

    def set_total_updates(self, updates: float) -> None:
        """Where the budgeted schedule ends (no recompile: it travels in the state)."""
        self.state = self.state._replace(total_updates=jnp.float32(updates))


class Stages:
    """Seconds per stage of the run, each printed as it ends."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, name: str, line: str) -> None:
        now = time.perf_counter()
        self.seconds[name], self._last = now - self._last, now
        print(f"[{name} {self.seconds[name]:.0f} s] {line}", flush=True)


def matmul_rate(size: int, repeats: int = 10) -> float:
    """bfloat16 FLOP/s of a `size`^3 matrix product: the best of 3 rounds of `repeats`."""
    keys = jax.random.split(jax.random.key(0))
    a, b = (jax.random.normal(k, (size, size), jnp.bfloat16) for k in keys)
    product = jax.jit(jnp.matmul)
    product(a, b).block_until_ready()
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeats):
            out = product(a, b)
        out.block_until_ready()
        best = min(best, time.perf_counter() - started)
    return 2.0 * size**3 * repeats / best


def measure(session: Session, batches: Batches, batch_tokens: int, seconds: float) -> Speed:
    """Trains for about `seconds` on `batches` (made at `batch_tokens`); their `Speed`."""
    tokens = batches.tokens()
    session.update(batches.batches[0]).loss_sum.block_until_ready()  # untimed: first use
    started, done, real = time.perf_counter(), 0, 0.0
    for index in itertools.cycle(batches.order(0)):
        result = session.update(batches.batches[index])
        done, real = done + 1, real + tokens[index]
        if done % CHECK_EVERY == 0:
            result.loss_sum.block_until_ready()
            if time.perf_counter() - started >= seconds:
                break
    elapsed = time.perf_counter() - started
    return Speed(real / elapsed, real / done, batch_tokens, measured=True)


def shape_config(shape: Shape) -> RunConfig:
    """The default run config with `shape`'s model."""
    return with_shape(RunConfig(), shape, TIMED_BATCH_TOKENS)


def plan_speeds(
    timed: Shape, speed: Speed, corpus: CorpusCounts, vocab_size: int
) -> dict[str, Speed]:
    """The timed shape's speed, and the others' scaled from it by their FLOPs per token."""
    length = corpus.epoch_tokens / max(corpus.pairs, 1)

    def per_token(shape: Shape) -> float:
        config = shape_config(shape).model.transformer_config(vocab_size, vocab_size)
        return float(flops.training_flops(config, length, length)) / length

    reference = per_token(timed)
    return {
        shape.name: speed if shape == timed else scaled_speed(speed, reference, per_token(shape))
        for shape in SHAPES
    }


def device_memory() -> int:
    """Bytes of the first device's memory (the host's on a CPU)."""
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def train(session: Session, batches: Batches, seconds: float, planned: int) -> dict:
    """Updates until `seconds` are spent; the schedule's end follows the measured rate."""
    tokens, batch_flops = batches.tokens(), batches.flops(session.model_config)
    updates, real, model_flops, epoch, losses = 0, 0.0, 0.0, 0, []
    pending = []
    started = time.perf_counter()
    while True:
        for index in batches.order(epoch):
            pending.append(session.update(batches.batches[index]))
            updates, real, model_flops = (
                updates + 1,
                real + tokens[index],
                model_flops + batch_flops[index],
            )
            if updates % CHECK_EVERY:
                continue
            sums = np.array([(float(r.loss_sum), float(r.tokens)) for r in pending]).sum(0)
            losses.append((updates, float(sums[0] / max(sums[1], 1.0))))
            pending = []
            elapsed = time.perf_counter() - started
            if elapsed >= seconds:
                return {
                    "updates": updates,
                    "planned_updates": planned,
                    "epochs": updates / len(batches.batches),
                    "seconds": elapsed,
                    "target_tokens": real,
                    "model_flops": model_flops,
                    "losses": losses,
                }
            session.set_total_updates(updates + (seconds - elapsed) * updates / elapsed)
        epoch += 1


class Evaluation:
    """Validation and test sources as `prepare` wrote them, decoded by one compiled search.

    Both splits are cut to their first `limit` lines (0 = all) and padded to one width
    and one number of rows per call, so the search compiles once.
    """

    SPLITS = ("valid", "test")

    def __init__(self, path: Path, limit: int):
        arrays = np.load(path)
        self.sources, self.rows, self.references = {}, {}, {}
        for split in self.SPLITS:
            references = [str(line) for line in arrays[f"{split}/references"]]
            count = min(limit, len(references)) if limit else len(references)
            keep = arrays[f"{split}/rows"] < count
            self.sources[split] = arrays[f"{split}/source"][keep]
            self.rows[split] = arrays[f"{split}/rows"][keep]
            self.references[split] = references[:count]
        self.width = max(source.shape[1] for source in self.sources.values())
        self.rows_per_call = min(DECODE_ROWS, max(len(rows) for rows in self.rows.values()))

    def translate(self, decoder: JaxDecoder, split: str, processor) -> list[str]:
        """Beam-search translations of a split's lines, in input order, detokenized."""
        source, rows = self.sources[split], self.rows[split]
        source = np.pad(source, [(0, 0), (0, self.width - source.shape[1])])
        hypotheses = [""] * len(self.references[split])  # lines not searched (empty): ""
        size = self.rows_per_call
        for start in range(0, len(rows), size):
            chunk = source[start : start + size]
            filled = np.concatenate([chunk, np.repeat(chunk[-1:], size - len(chunk), 0)])
            ids = decoder(filled).ids[: len(chunk), 0]  # [rows, length]: the best hypothesis
            for row, hypothesis in zip(rows[start : start + size], ids, strict=True):
                pieces = hypothesis.tolist()
                pieces = pieces[: pieces.index(EOS_ID)] if EOS_ID in pieces else pieces
                hypotheses[row] = processor.decode([p for p in pieces if p > EOS_ID])
        return hypotheses


def device_name() -> str:
    """The GPU's name from nvidia-smi, else JAX's device kind and the processor."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
        if out:
            return out.splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{jax.devices()[0].device_kind} ({platform.processor() or platform.machine()})"


def run(bundle: Path, out: Path, minutes: float, matmul_size: int, eval_limit: int) -> dict:
    """The whole benchmark; returns what it writes to `out/accelerator.json`."""
    if keras.backend.backend() != "jax":
        raise SystemExit(f"bench.accelerator run: KERAS_BACKEND is {keras.backend.backend()}")
    wall = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((bundle / MANIFEST).read_text())
    vocab_size = manifest["vocab_size"]
    corpus = CorpusCounts(**manifest["corpus"])
    prepared = sorted(int(t) for t in manifest["batches"])
    print(f"device: {device_name()}; jax {jax.__version__}, keras {keras.__version__}", flush=True)

    stages = Stages()
    rate = matmul_rate(matmul_size)
    stages.mark("matmul", f"bf16 matmul {matmul_size}^3: {rate / 1e12:,.1f} TFLOP/s")

    # Plan: time the smallest shape at the planner's timing batch, scale the others.
    timed_shape = SHAPES[0]
    timing = Batches.load(bundle_file(bundle, TIMED_BATCH_TOKENS))
    probe = Session.of(shape_config(timed_shape), vocab_size, total_updates=1e4)
    probe.compile(timing)
    stages.mark("compile_timing", f"compiled {timed_shape.name} at {TIMED_BATCH_TOKENS:,}")
    speed = measure(probe, timing, TIMED_BATCH_TOKENS, MEASURE_SECONDS)
    del probe
    stages.mark("measure", f"{timed_shape.name}: {speed.tokens_per_second:,.0f} tokens/s")
    speeds = plan_speeds(timed_shape, speed, corpus, vocab_size)
    memory = {s.name: batch_tokens_in_memory(s, vocab_size, device_memory()) for s in SHAPES}
    budget = Budget(seconds=minutes * 60)
    plan = make_plan(corpus, budget, speeds, memory_batch_tokens=memory)
    batch_tokens = plan.value("data.pipeline.batch_tokens")
    if batch_tokens not in prepared:
        used = min(prepared, key=lambda t: abs(t - batch_tokens))
        print(f"the plan chose {batch_tokens:,} batch tokens; prepared {prepared}: using {used:,}")
        batch_tokens = used
    batches = (
        timing
        if batch_tokens == TIMED_BATCH_TOKENS
        else Batches.load(bundle_file(bundle, batch_tokens))
    )
    session = Session.of(load_config(None, plan.overrides()), vocab_size, plan.updates)
    session.compile(batches)
    stages.mark("compile", f"compiled the plan's step at {batch_tokens:,} batch tokens")
    if plan.shape == timed_shape and batch_tokens != TIMED_BATCH_TOKENS:
        # The chosen batch's own speed (a token costs more in a small batch), timed on the
        # session itself, whose state then goes back to the initial weights.
        at_batch = measure(session, batches, batch_tokens, MEASURE_SECONDS)
        session.state = session.trainer.state()
        batch_speeds = {(plan.shape.name, batch_tokens): at_batch}
        plan = make_plan(
            corpus, budget, speeds, memory_batch_tokens=memory, batch_speeds=batch_speeds
        )
        session.set_total_updates(plan.updates)
        stages.mark("measure_batch", f"at {batch_tokens:,}: {at_batch.tokens_per_second:,.0f}")
    for line in plan.describe():
        print(f"plan: {line}", flush=True)

    trained = train(session, batches, minutes * 60, plan.updates)
    rate_line = f"{trained['target_tokens'] / trained['seconds']:,.0f} target tokens/s"
    stages.mark("train", f"{trained['updates']:,} updates, {rate_line}")
    session.trainer.write_back(session.state)

    search_model = Transformer(session.model_config)  # the search runs in float32
    search_model.build()
    search_model.set_weights(session.model.get_weights())
    decoder = JaxDecoder(search_model, SearchConfig(beam_size=4))
    processor = sentencepiece.SentencePieceProcessor(model_file=str(bundle / "vocab" / "spm.model"))
    evaluation = Evaluation(bundle / EVAL_FILE, eval_limit)
    scores = {}
    for split in Evaluation.SPLITS:
        hypotheses = evaluation.translate(decoder, split, processor)
        metrics, _ = score_corpus(hypotheses, evaluation.references[split])
        scores[split] = {m.key: m.score for m in metrics} | {"signature": metrics[0].signature}
        (out / f"{split}.hyp").write_text("\n".join(hypotheses) + "\n", "utf-8")
        stages.mark(f"decode_{split}", f"{split}: BLEU {scores[split]['bleu']:.2f}")

    result = {
        "device": device_name(),
        "command": harness.command_line(),
        "vocab_size": vocab_size,
        "versions": {"jax": jax.__version__, "keras": keras.__version__},
        "prepared": manifest["prepared"],
        "matmul": {"size": matmul_size, "flops_per_second": rate},
        "stages": stages.seconds,
        "plan": json.loads(plan.to_json()),
        "plan_lines": plan.describe(),
        "batch_tokens": batch_tokens,
        "policy": POLICY,
        "training": trained,
        "tokens_per_second": trained["target_tokens"] / trained["seconds"],
        "mfu": trained["model_flops"] / trained["seconds"] / rate,
        "scores": scores,
        "eval_limit": eval_limit,
        "wall_seconds": time.perf_counter() - wall,
        # The machines lent have none; a dry run here blocks it (tests/bench).
        "tensorflow_loaded": "tensorflow" in sys.modules,
    }
    (out / RESULTS_FILE).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out / RESULTS_FILE} ({result['wall_seconds']:.0f} s in all)", flush=True)
    return result
