"""Training speed against OpenNMT-tf 2.32, both measured here, alternating, in one run.

Each side's rate is what its own log reports, the first report (tracing) left out. The short
mode trains our side only, for a fixed number of updates, not minutes, so that a loaded
machine still logs enough progress lines.
"""

from __future__ import annotations

import json
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
from translator.io import iter_lines
from translator.pipelines import build_vocabulary

render = harness.Template("peers")
TARGET_RATIO = 1.5
PEER_PACKAGES = ("OpenNMT-tf==2.32.0", "tensorflow-cpu==2.13.*")
WORKDIR, MINUTES, ROUNDS = Path("runs/bench-peers"), 3.0, 2  # minutes per side and round
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
    "label_smoothing": 0.1,
}
PEER_TRAIN = {
    "batch_size": BATCH_TOKENS,
    "batch_type": "tokens",
    "effective_batch_size": None,  # no accumulation: one batch, one update
    "length_bucket_width": 4,
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
    if not (vocab / "vocab.json").is_file():
        files = [data / name for name in harness.TRAIN]
        build_vocabulary(files[:1], files[1:], vocab, vocab_size=VOCAB_SIZE)
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


def train(side: str, workdir: Path, inputs: dict, data: Path, short: bool, tag: str) -> dict:
    """One side's training for `MINUTES` (short: ours only, `SHORT_STEPS` updates of the tiny
    preset); the mean of the target tokens/s its log shows, and our precision."""
    run_dir = workdir / f"{side}-{tag}"
    shutil.rmtree(run_dir, ignore_errors=True)
    if side == "onmt":
        command = [str(inputs["bin"] / "onmt-main"), "--model", str(workdir / "onmt_model.py")]
        command += ["--config", str(workdir / "onmt-config.yml"), "--model_dir", str(run_dir)]
        command, seconds, rates, quiet = [*command, "train"], MINUTES * 60, peer_rates, "1"
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
            *OUR_SHAPE,
            *(budget if short else [f"train.max_minutes={MINUTES}"]),
        ]
        command = [sys.executable, "-m", "translator", "train", f"--run-dir={run_dir}"]
        command += [f"--set={item}" for item in settings]
        seconds, rates, quiet = 600 if short else MINUTES * 60 + 120, our_rates, "3"  # if hung
    log = workdir / f"{side}-{tag}.log"
    text = harness.run_for(command, seconds, log, {"TF_CPP_MIN_LOG_LEVEL": quiet})
    if not (found := rates(text)):
        raise RuntimeError(f"{log.name}: no training rate in the log, which ends:\n{text[-3000:]}")
    metadata = run_dir / "model" / "metadata.json"  # ours, unless the run had to be stopped
    precision = json.loads(metadata.read_text()).get("precision") if metadata.is_file() else "?"
    rate = statistics.mean(found)
    return {"tokens_per_second": rate, "reports": len(found), "precision": precision}


def mean(runs: list[dict]) -> float:
    return statistics.mean(run["tokens_per_second"] for run in runs)


def peers_markdown(ours: list[dict], peer: list[dict], ratio: float, minutes: float, seconds):
    """The section: the template filled with this run's figures (its local names)."""
    rows = [
        render("round-row", round=i + 1, ours=o, peer=p, ratio=mean([o]) / mean([p]))
        for i, (o, p) in enumerate(zip(ours, peer, strict=True))
    ]
    verdict = render("verdict-meets" if ratio >= TARGET_RATIO else "verdict-misses", ratio=ratio)
    rows, ours_mean, peer_mean, wall_minutes = "\n".join(rows), mean(ours), mean(peer), seconds / 60
    figures = dict(vocab_size=VOCAB_SIZE, batch_tokens=BATCH_TOKENS, max_length=MAX_LENGTH)
    return render("section", **harness.footer(), **figures, target_ratio=TARGET_RATIO, **locals())


@harness.command
def main(argv: list[str] | None = None) -> int:
    args = harness.parse(harness.make_parser("peers", __doc__), argv)
    data, started = harness.find_data(args.data), time.perf_counter()
    runs = {"ours": [], "onmt": []}
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as scratch:
        workdir = (Path(scratch) if args.short else WORKDIR).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        inputs = prepare(workdir, data, args.short)
        for index in range(1 if args.short else ROUNDS):
            for side in ("ours",) if args.short else ("ours", "onmt"):
                runs[side].append(train(side, workdir, inputs, data, args.short, f"r{index}"))
                print(f"round {index + 1}: {side} {runs[side][-1]['tokens_per_second']:,.0f} tok/s")
    if args.short:  # our side only: no ratio
        return 0
    ours, peer = runs["ours"], runs["onmt"]
    ratio = mean(ours) / mean(peer)
    harness.report_target("training tok/s vs OpenNMT-tf 2.32 (same run)", ratio, TARGET_RATIO, "x")
    seconds = time.perf_counter() - started
    return harness.publish(args, "peers", peers_markdown, ours, peer, ratio, MINUTES, seconds)
