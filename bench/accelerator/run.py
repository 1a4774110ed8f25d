"""`run`: on the accelerator, with no TensorFlow: measure, plan, train, decode, score.

Every step shape is compiled before the training clock starts, so `--minutes` are updates.
"""

import concurrent.futures
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
from training.config import RunConfig, apply_changes
from training.jax_step import JaxTrainer
from training.optimizer import make_optimizer, make_schedule
from training.plan import SHAPES, Budget, CorpusCounts, Speed, batch_tokens_in_memory, make_plan
from training.planning import TIMED_BATCH_TOKENS, flops_per_token, scaled_speed, with_shape
from translator import flops
from translator.constants import EOS_ID
from translator.evaluation.scoring import score_corpus
from translator.model import Transformer
from translator.search import JaxDecoder, SearchConfig

POLICY = "mixed_bfloat16"  # training's; the search runs in float32, as `translate` does
MEASURE_SECONDS = 6.0  # of updates per speed measurement
CHECK_EVERY = 20  # updates between two looks at the clock (each waits for the device)
DECODE_ROWS = 1024  # sentences a call: one compiled search for validation and test alike


class Batches:
    """One epoch of training batches at one batch size, on the device: `batches`, in tf.data's
    order, ({"source_ids", "decoder_input_ids"}, labels); `lengths`, real tokens per row."""

    def __init__(self, path: Path):
        arrays, self.batches, self.lengths = np.load(path), [], []
        for length, index in arrays["order"]:
            names = ("source", "decoder", "labels")
            source, decoder, labels = (
                arrays[f"{length}/{n}"][index].astype(np.int32) for n in names
            )
            features = {"source_ids": source, "decoder_input_ids": decoder}
            self.batches.append(jax.device_put((features, labels)))
            self.lengths.append(((source > 0).sum(1), (labels > 0).sum(1)))

    def keep_shape(self, shape: tuple[int, ...]) -> "Batches":
        """Only the batches of one labels shape (one compiled step)."""
        kept = [i for i, (_, labels) in enumerate(self.batches) if labels.shape == shape]
        self.batches = [self.batches[i] for i in kept]
        self.lengths = [self.lengths[i] for i in kept]
        return self

    def shapes(self) -> dict[tuple[int, ...], int]:
        """The first batch of each distinct shape: {labels shape: batch index}."""
        first: dict[tuple[int, ...], int] = {}
        for index, (_, labels) in enumerate(self.batches):
            first.setdefault(tuple(labels.shape), index)
        return first

    def flops(self, config) -> np.ndarray:
        return np.array([flops.training_flops(config, s, t).sum() for s, t in self.lengths])

    def tokens(self) -> np.ndarray:
        return np.array([float(t.sum()) for _, t in self.lengths])

    def order(self, epoch: int) -> np.ndarray:
        """Batch indices of an epoch: tf.data's order first, then seeded permutations."""
        count = len(self.batches)
        return np.random.default_rng(epoch).permutation(count) if epoch else np.arange(count)


class Session:
    """A model (its dtype policy the training precision), its optimizer and its step compiled
    for every batch shape it meets; `total_updates` is where the budgeted schedule ends."""

    def __init__(self, model: Transformer, config: RunConfig, total_updates: float):
        self.model, self.model_config = model, model.config
        schedule = make_schedule(config, model.config.d_model)
        schedule.total_updates.assign(float(total_updates))
        optimizer, loss = make_optimizer(config, model.config.d_model, schedule), config.optimizer
        self.trainer = JaxTrainer(model, optimizer, schedule, loss.label_smoothing, loss.clip_norm)
        self.state, self.steps = self.trainer.state(), {}

    @classmethod
    def of(cls, config: RunConfig, vocab_size: int, total_updates: float) -> "Session":
        model = Transformer(config.model.transformer_config(vocab_size, vocab_size), dtype=POLICY)
        return cls(model, config, total_updates)

    def compile(self, batches: Batches) -> None:
        """Compiles the step for each new shape, side by side (XLA releases the GIL)."""
        new = {s: i for s, i in batches.shapes().items() if s not in self.steps}
        lowered = {
            s: self.trainer.step.lower(self.state, batches.batches[i]) for s, i in new.items()
        }
        with concurrent.futures.ThreadPoolExecutor(max(len(lowered), 1)) as pool:
            futures = {s: pool.submit(program.compile) for s, program in lowered.items()}
        self.steps.update({s: future.result() for s, future in futures.items()})

    def update(self, batch):
        """One update; returns its `StepResult` (not waited for)."""
        self.state, result = self.steps[tuple(batch[1].shape)](self.state, batch)
        return result

    def set_total_updates(self, updates: float) -> None:  # in the state: no recompile
        self.state = self.state._replace(total_updates=jnp.float32(updates))


class Stages:
    """Seconds per stage of the run, each printed as it ends."""

    def __init__(self):
        self.seconds, self._last = {}, time.perf_counter()

    def mark(self, name: str, line: str) -> None:
        now = time.perf_counter()
        self.seconds[name], self._last = now - self._last, now
        print(f"[{name} {self.seconds[name]:.0f} s] {line}", flush=True)


def matmul_rate(size: int, repeats: int = 10) -> float:
    """bfloat16 FLOP/s of a `size`^3 matrix product."""
    keys = jax.random.split(jax.random.key(0))
    a, b = (jax.random.normal(k, (size, size), jnp.bfloat16) for k in keys)
    product = jax.jit(jnp.matmul)
    return harness.matmul_rate(
        lambda: [product(a, b) for _ in range(repeats)][-1].block_until_ready(), size, repeats
    )


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
    return Speed(real / (time.perf_counter() - started), real / done, batch_tokens, measured=True)


def device_memory() -> int:
    """Bytes of the first device's memory (the host's on a CPU)."""
    stats = jax.devices()[0].memory_stats() or {}
    pages = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(stats.get("bytes_limit", pages))


def train(session: Session, batches: Batches, seconds: float, planned: int) -> dict:
    """Updates until `seconds` are spent; the schedule's end follows the measured rate."""
    tokens, batch_flops = batches.tokens(), batches.flops(session.model_config)
    updates, real, model_flops, losses, pending = 0, 0.0, 0.0, [], []
    started = time.perf_counter()
    for epoch in itertools.count():
        for index in batches.order(epoch):
            pending.append(session.update(batches.batches[index]))
            updates, real = updates + 1, real + tokens[index]
            model_flops += batch_flops[index]
            if updates % CHECK_EVERY:
                continue
            sums = np.array([(float(r.loss_sum), float(r.tokens)) for r in pending]).sum(0)
            losses.append((updates, float(sums[0] / max(sums[1], 1.0))))
            pending, elapsed = [], time.perf_counter() - started
            if elapsed >= seconds:
                epochs, flops_done = updates / len(batches.batches), model_flops
                return dict(updates=updates, planned_updates=planned, epochs=epochs,
                            seconds=elapsed, target_tokens=real, model_flops=flops_done,
                            losses=losses)  # fmt: skip
            session.set_total_updates(updates + (seconds - elapsed) * updates / elapsed)


class Evaluation:
    """Validation and test sources as `prepare` wrote them, cut to their first `limit` lines
    (0: all) and padded to one width and one number of rows a call: one compiled search."""

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
        source, rows, size = self.sources[split], self.rows[split], self.rows_per_call
        source = np.pad(source, [(0, 0), (0, self.width - source.shape[1])])
        hypotheses = [""] * len(self.references[split])  # lines not searched (empty): ""
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
    query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, check=True, timeout=30).stdout
        if out.strip():
            return out.strip().splitlines()[0]
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
    vocab_size, corpus = manifest["vocab_size"], CorpusCounts(**manifest["corpus"])
    prepared = sorted(int(t) for t in manifest["batches"])
    print(f"device: {device_name()}; jax {jax.__version__}, keras {keras.__version__}", flush=True)
    stages = Stages()
    rate = matmul_rate(matmul_size)
    stages.mark("matmul", f"bf16 matmul {matmul_size}^3: {rate / 1e12:,.1f} TFLOP/s")

    # Plan: time the smallest shape at the planner's timing batch, scale the others by FLOPs.
    timed, timing = SHAPES[0], Batches(bundle_file(bundle, TIMED_BATCH_TOKENS))
    probe = Session.of(with_shape(RunConfig(), timed, TIMED_BATCH_TOKENS), vocab_size, 1e4)
    probe.compile(timing)
    stages.mark("compile_timing", f"compiled {timed.name} at {TIMED_BATCH_TOKENS:,}")
    speed = measure(probe, timing, TIMED_BATCH_TOKENS, MEASURE_SECONDS)
    del probe
    stages.mark("measure", f"{timed.name}: {speed.tokens_per_second:,.0f} tokens/s")
    length = corpus.epoch_tokens / max(corpus.pairs, 1)
    cost = {s: flops_per_token(s, RunConfig(), (vocab_size, vocab_size), length) for s in SHAPES}
    speeds = {s.name: scaled_speed(speed, cost[timed], cost[s]) for s in SHAPES}
    speeds[timed.name] = speed  # measured, in its place among the scaled
    memory = {s.name: batch_tokens_in_memory(s, vocab_size, device_memory()) for s in SHAPES}
    budget = Budget(seconds=minutes * 60)
    plan = make_plan(corpus, budget, speeds, memory_batch_tokens=memory)
    batch_tokens = plan.batch_tokens
    if batch_tokens not in prepared:
        used = min(prepared, key=lambda t: abs(t - batch_tokens))
        print(f"the plan chose {batch_tokens:,} batch tokens; prepared {prepared}: using {used:,}")
        batch_tokens = used
    batches = timing
    if batch_tokens != TIMED_BATCH_TOKENS:
        batches = Batches(bundle_file(bundle, batch_tokens))
    session = Session.of(apply_changes(RunConfig(), plan.changes()), vocab_size, plan.updates)
    session.compile(batches)
    stages.mark("compile", f"compiled the plan's step at {batch_tokens:,} batch tokens")
    if plan.shape == timed and batch_tokens != TIMED_BATCH_TOKENS:
        # The chosen batch's own speed (a token costs more in a small batch), timed on the
        # session, whose state then goes back to the initial weights.
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
    tokens_per_second = trained["target_tokens"] / trained["seconds"]
    stages.mark(
        "train", f"{trained['updates']:,} updates, {tokens_per_second:,.0f} target tokens/s"
    )
    session.trainer.write_back(session.state)
    search_model = Transformer(session.model_config)  # float32
    search_model.build()
    search_model.set_weights(session.model.get_weights())
    decoder = JaxDecoder(search_model, SearchConfig(beam_size=4))
    processor = sentencepiece.SentencePieceProcessor(model_file=str(bundle / "vocab" / "spm.model"))
    evaluation, scores = Evaluation(bundle / EVAL_FILE, eval_limit), {}
    for split in Evaluation.SPLITS:
        hypotheses = evaluation.translate(decoder, split, processor)
        metrics, _ = score_corpus(hypotheses, [evaluation.references[split]])
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
        "tokens_per_second": tokens_per_second,
        "mfu": trained["model_flops"] / trained["seconds"] / rate,
        "scores": scores,
        "eval_limit": eval_limit,
        "wall_seconds": time.perf_counter() - wall,
        "tensorflow_loaded": "tensorflow" in sys.modules,  # a dry run here blocks it
    }
    (out / RESULTS_FILE).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out / RESULTS_FILE} ({result['wall_seconds']:.0f} s in all)", flush=True)
    return result


def shape_speeds(bundle: Path, out: Path, batch_tokens: int, seconds: float, size: int) -> dict:
    """Every planner shape's measured speed and MFU at `batch_tokens`, on the most common batch
    shape of the bundle (one compile each): what FLOPs scaling from the smallest would say."""
    manifest = json.loads((bundle / MANIFEST).read_text())
    vocab_size, stages = manifest["vocab_size"], Stages()
    rate = matmul_rate(size)
    stages.mark("matmul", f"bf16 matmul {size}^3: {rate / 1e12:,.1f} TFLOP/s")
    batches = Batches(bundle_file(bundle, batch_tokens))
    shapes = [tuple(labels.shape) for _, labels in batches.batches]
    common = max(set(shapes), key=shapes.count)
    batches.keep_shape(common)
    rows = {}
    for shape in SHAPES:
        session = Session.of(with_shape(RunConfig(), shape, batch_tokens), vocab_size, 1e4)
        session.compile(batches)
        speed = measure(session, batches, batch_tokens, seconds)
        per_token = batches.flops(session.model_config).sum() / batches.tokens().sum()
        mfu = per_token * speed.tokens_per_second / rate
        rows[shape.name] = {"tokens_per_second": speed.tokens_per_second, "mfu": mfu}
        stages.mark(shape.name, f"{speed.tokens_per_second:,.0f} target tokens/s, MFU {mfu:.1%}")
    result = {"device": device_name(), "batch_shape": common, "batch_tokens": batch_tokens,
              "matmul_flops_per_second": rate, "policy": POLICY, "shapes": rows,
              "stages": stages.seconds}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "speeds.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
