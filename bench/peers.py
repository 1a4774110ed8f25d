"""Training speed against OpenNMT-tf 2.32, both measured here, alternating, in one run: ours
in float32, ours in `auto`'s precision (unless float32), the peer; each side's rate from its
own log, the first report left out. Short mode: our side only, a fixed number of updates."""

import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sentencepiece
import yaml

from bench import harness
from training.record import RunRecord
from translator.artifacts import METADATA_FILE
from translator.constants import DEFAULT_LABEL_SMOOTHING
from translator.io import iter_lines
from translator.pipelines import PipelineConfig

render = harness.Template("peers")
# Goals: ours over the peer with both in float32, and each side in its default precision.
TARGET_RATIO, DEFAULT_RATIO = 1.5, 2.0
PEER_PACKAGES = ("OpenNMT-tf==2.32.0", "tensorflow-cpu==2.13.*")
WORKDIR, MINUTES, ROUNDS = Path("runs/bench-peers"), 3.0, 2  # minutes per side and round
# The sides in the order they take turns: ours in float32, ours in `auto`, the peer.
FLOAT32, AUTO, PEER = "ours float32", "ours auto", "onmt"
VOCAB_SIZE, BATCH_TOKENS, MAX_LENGTH = 8000, 4096, 128
LOG_EVERY, SHORT_STEPS = 20, 80  # a progress line every 20 updates, as the peer's
# Our comparison shape, as `translator train --set` overrides of the default config.
OUR_SHAPE = (
    "model.preset=small",  # 3+3 layers, d_model 256, 4 heads, FFN 1024
    "model.overrides={dropout: 0.1}",
    f"data.pipeline.batch_tokens={BATCH_TOKENS}",
    f"data.pipeline.max_source_length={MAX_LENGTH}",
    f"data.pipeline.max_target_length={MAX_LENGTH}",
)
# The same model in OpenNMT-tf (its custom-model file for `onmt-main --model`).
PEER_MODEL = """import opennmt


def model():
    return opennmt.models.Transformer(
        num_layers=3, num_units=256, num_heads=4, ffn_inner_dim=1024, dropout=0.1,
        attention_dropout=0.0, ffn_dropout=0.0,
        share_embeddings=opennmt.models.EmbeddingsSharingLevel.ALL,
    )
"""
# Its run config: the same batches, lengths and optimizer family, no validation.
PEER_PARAMS = {
    "optimizer": "Adam",
    "optimizer_params": {"beta_1": 0.9, "beta_2": 0.98, "epsilon": 1e-9},
    "learning_rate": 2.0,
    "decay_type": "NoamDecay",
    "decay_params": {"model_dim": 256, "warmup_steps": 600},
    "label_smoothing": DEFAULT_LABEL_SMOOTHING,
}
PEER_TRAIN = {
    "batch_size": BATCH_TOKENS,
    "batch_type": "tokens",
    "effective_batch_size": None,  # no accumulation: one batch, one update
    "length_bucket_width": PipelineConfig().bucket_width,  # our batching
    "maximum_features_length": MAX_LENGTH,
    "maximum_labels_length": MAX_LENGTH,
    "save_checkpoints_steps": 1_000_000,
    "save_summary_steps": LOG_EVERY,
    "max_step": 1_000_000,
    "sample_buffer_size": -1,
}
# "Step = 20 ; steps/s = 0.70, tokens/s = 4822 (2289 source, 2533 target) ; Learning rate..."
PEER_LINE = re.compile(r"tokens/s = \d+ \(\d+ source, (\d+) target\)")
# "... training.callbacks: step 40/~356 (11%) | loss 5.1 | lr 4e-3 | 7,890 target tok/s | ..."
OUR_LINE = re.compile(r"training\.callbacks: step .*?\| ([\d,]+) target tok/s")


def peer_rates(log_text: str) -> list[float]:
    """Target tokens/s of each report in an OpenNMT-tf training log, the first left out."""
    return [float(match.group(1)) for match in PEER_LINE.finditer(log_text)][1:]


def our_rates(log_text: str) -> list[float]:
    """Target tokens/s of each progress line of our log (over the time since the previous
    line, as the peer's), the first (tracing, the shuffle buffer) left out as the peer's."""
    return [float(m.group(1).replace(",", "")) for m in OUR_LINE.finditer(log_text)][1:]


def prepare(workdir: Path, data: Path, short: bool) -> dict[str, Path]:
    """The joint vocabulary; in full mode also the peer's environment, its training data cut
    into our pieces, its vocabulary and its run config."""
    vocab = workdir / "vocab"
    harness.vocabulary(vocab, data, VOCAB_SIZE)
    if short:
        return {"vocab": vocab}
    bin_dir = workdir / "opennmt-tf-venv" / "bin"
    if not (bin_dir / "onmt-main").is_file():
        print(f"installing {' '.join(PEER_PACKAGES)} into {bin_dir.parent}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(bin_dir.parent)], check=True)
        pip = [str(bin_dir / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, *PEER_PACKAGES], check=True)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(vocab / "spm.model"))
    files = {}
    for key, side in (("train_features_file", "en"), ("train_labels_file", "de")):
        files[key] = path = workdir / f"train.{side}.pieces"
        if not path.is_file():
            encoded = processor.encode(list(iter_lines(data / f"train.{side}.gz")), out_type=str)
            path.write_text("".join(" ".join(p) + "\n" for p in encoded), encoding="utf-8")
    vocabulary = workdir / "onmt-vocab.txt"
    if not vocabulary.is_file():
        convert = ["--from_vocab", str(vocab / "spm.vocab"), "--from_format", "sentencepiece"]
        command = [str(bin_dir / "onmt-build-vocab"), *convert, "--save_vocab", str(vocabulary)]
        subprocess.run(command, check=True, capture_output=True)
    (workdir / "onmt_model.py").write_text(PEER_MODEL, encoding="utf-8")
    files |= {"source_vocabulary": vocabulary, "target_vocabulary": vocabulary}
    data_config = {key: str(value) for key, value in files.items()}
    config = {"data": data_config, "params": PEER_PARAMS, "train": PEER_TRAIN}
    (workdir / "onmt-config.yml").write_text(yaml.safe_dump(config, sort_keys=False), "utf-8")
    return {"vocab": vocab, "bin": bin_dir}


def train(side: str, workdir: Path, inputs: dict, data: Path, args, tag: str) -> dict:
    """One side's training for `args.minutes` (short: ours only, `SHORT_STEPS` updates of
    the tiny preset); the mean of the target tokens/s its log shows, and its precision."""
    run_name = f"{side.replace(' ', '-')}-{tag}"  # its run directory and log file
    run_dir = workdir / run_name
    shutil.rmtree(run_dir, ignore_errors=True)
    if side == PEER:
        command = [str(inputs["bin"] / "onmt-main"), "--model", str(workdir / "onmt_model.py")]
        command += ["--config", str(workdir / "onmt-config.yml"), "--model_dir", str(run_dir)]
        command, seconds, rates, quiet = [*command, "train"], args.minutes * 60, peer_rates, "1"
    else:
        budget = ["train.max_minutes=0", f"train.max_steps={SHORT_STEPS}", "model.preset=tiny"]
        settings = [
            f"data.train_source={data / 'train.en.gz'}",
            f"data.train_target={data / 'train.de.gz'}",
            "data.valid_source=",
            "data.valid_target=",
            f"data.vocabulary={inputs['vocab']}",
            f"train.log_every_steps={LOG_EVERY}",
            "eval.every_steps=0",  # no validation (nor the peer), so no mid-run epochs
            "checkpoint.every_steps=1000000",  # as the peer's save_checkpoints_steps
            "checkpoint.average_last=0",
            f"train.precision={'float32' if side == FLOAT32 else 'auto'}",
            *OUR_SHAPE,
            *(budget if args.short else [f"train.max_minutes={args.minutes}"]),
        ]
        command = [sys.executable, "-m", "translator", "train", f"--run-dir={run_dir}"]
        command += [f"--set={item}" for item in settings]
        seconds, rates, quiet = 600 if args.short else args.minutes * 60 + 120, our_rates, "3"
    log = workdir / f"{run_name}.log"
    text = harness.run_for(command, seconds, log, {"TF_CPP_MIN_LOG_LEVEL": quiet})
    if not (found := rates(text)):
        raise RuntimeError(f"{log.name}: no training rate in the log, which ends:\n{text[-3000:]}")
    precision = "float32" if side == PEER else "?"
    if (run_dir / "model" / METADATA_FILE).is_file():  # ours, unless the run had to be stopped
        precision = RunRecord.read(run_dir / "model").precision
    rate = statistics.mean(found)
    return {"tokens_per_second": rate, "reports": len(found), "precision": precision}


def mean(runs: list[dict]) -> float:
    return statistics.mean(run["tokens_per_second"] for run in runs)


def ratios(runs: dict[str, list[dict]]) -> dict[str, float]:
    """Ours over the peer: {"float32": both in float32, "default": each side's default
    precision (ours `auto`; float32 where `auto` is float32 here)}."""
    peer = mean(runs[PEER])
    default = runs.get(AUTO) or runs[FLOAT32]
    return {"float32": mean(runs[FLOAT32]) / peer, "default": mean(default) / peer}


def peers_markdown(runs: dict[str, list[dict]], mfu: dict[str, float], minutes, seconds, auto):
    """The section (its local names): `runs`, {side: [{"tokens_per_second", "reports",
    "precision"}]} a round; `mfu` by side; `minutes` a side and round; `seconds` in all."""
    sides = [side for side in (FLOAT32, AUTO, PEER) if side in runs]
    found = ratios(runs)
    rows = []
    for index, rounds in enumerate(zip(*(runs[side] for side in sides), strict=True)):
        cells = " | ".join(render("cell", run=run) for run in rounds)
        by_side = dict(zip(sides, rounds, strict=True))
        round_ratios = ratios({side: [run] for side, run in by_side.items()})
        rows.append(render("round-row", round=index + 1, cells=cells, **round_ratios))
    means = " | ".join(f"**{mean(runs[side]):,.0f}**" for side in sides)
    mfus = " | ".join(f"{mfu[side]:.0%}" for side in sides)
    auto_column = render("auto-column", auto=auto) if AUTO in runs else ""
    auto_rule = "---|" if AUTO in runs else ""
    verdicts = {
        n: render("verdict-meets" if found[n] >= goal else "verdict-misses", ratio=found[n])
        for n, goal in (("float32", TARGET_RATIO), ("default", DEFAULT_RATIO))
    }
    default_note = "" if AUTO in runs else render("no-auto")
    rows, wall_minutes = "\n".join(rows), seconds / 60
    figures = dict(vocab_size=VOCAB_SIZE, batch_tokens=BATCH_TOKENS, max_length=MAX_LENGTH)
    goals = dict(target_ratio=TARGET_RATIO, default_ratio=DEFAULT_RATIO)
    return render("section", **harness.footer(), **figures, **goals, **found, **locals())


def model_flops(data: Path, vocab: Path) -> tuple[float, dict[str, float], str]:
    """The comparison shape's training FLOPs per target token, this machine's matmul
    FLOP/s in float32 and bfloat16, and the precision `auto` picks here."""
    import tensorflow as tf

    from bench.training import flops_per_target_token, matmul_flops_per_second
    from training.config import load_config
    from training.engines.tf_strategy import select_precision

    vocabulary, run_config = harness.vocabulary(vocab, data), load_config(None, list(OUR_SHAPE))
    config = run_config.model.transformer_config(
        vocabulary.source_vocab_size, vocabulary.target_vocab_size
    )
    flops = flops_per_target_token(config, data, vocabulary, run_config.data.pipeline)
    peaks = {dtype: matmul_flops_per_second(dtype) for dtype in ("float32", "bfloat16")}
    return flops, peaks, select_precision("auto", tf.distribute.get_strategy())


@harness.command
def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("peers", __doc__)
    parser.add_argument("--minutes", type=float, default=MINUTES, help="per side and round")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of the sides")
    args = harness.parse(parser, argv)
    data, started = harness.find_data(args.data), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as scratch:
        workdir = (Path(scratch) if args.short else WORKDIR).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        inputs = prepare(workdir, data, args.short)
        if args.short:  # our side only: no ratio
            run = train(AUTO, workdir, inputs, data, args, "r0")
            print(f"round 1: ours {run['tokens_per_second']:,.0f} tok/s")
            return 0
        flops, peaks, auto = model_flops(data, inputs["vocab"])
        sides = (FLOAT32, PEER) if auto == "float32" else (FLOAT32, AUTO, PEER)
        runs = {side: [] for side in sides}
        for index in range(args.rounds):
            for side in sides:
                runs[side].append(train(side, workdir, inputs, data, args, f"r{index}"))
                print(f"round {index + 1}: {side} {runs[side][-1]['tokens_per_second']:,.0f} tok/s")
    peak = {FLOAT32: peaks["float32"], AUTO: peaks["bfloat16"], PEER: peaks["float32"]}
    if auto not in ("float32", "mixed_bfloat16"):  # a GPU's mixed_float16: no CPU peak for it
        peak[AUTO] = float("nan")
    mfu = {side: mean(runs[side]) * flops / peak[side] for side in sides}
    found = ratios(runs)
    name = "training tok/s vs OpenNMT-tf 2.32"
    harness.report_target(f"{name}, both float32 (same run)", found["float32"], TARGET_RATIO, "x")
    default = f"{name}, each side's default precision (same run)"
    harness.report_target(default, found["default"], DEFAULT_RATIO, "x")
    seconds = time.perf_counter() - started
    return harness.publish(args, "peers", peers_markdown, runs, mfu, args.minutes, seconds, auto)
