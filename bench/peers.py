"""Training speed against OpenNMT-tf 2.32, both measured here, alternating, in one run.

    python -m bench.peers [--minutes 3] [--rounds 2] [--workdir DIR]
    python -m bench.peers --short               # our side only (no peer install)

The comparison shape (3+3 layers, d_model 256, 4 heads, FFN 1024, shared embeddings), a
joint 8,000-piece vocabulary, 4,096-token batches, at most 128 pieces, Multi30k EN-DE.
The peer is installed into its own virtual environment under --workdir and trains on the
same pieces. Each round trains ours, then the peer, for the same minutes; each side's
target tokens/s is what its own log reports, the first report (tracing) left out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench import harness

render = harness.Template("peers")
TARGET_RATIO = 1.5
PEER_PACKAGES = ("OpenNMT-tf==2.32.0", "tensorflow-cpu==2.13.*")
DEFAULT_WORKDIR = Path("runs/bench-peers")
VOCAB_SIZE, BATCH_TOKENS, MAX_LENGTH = 8000, 4096, 128
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
    "save_summary_steps": 20,
    "max_step": 1_000_000,
    "sample_buffer_size": -1,
}
# "Step = 20 ; steps/s = 0.70, tokens/s = 4822 (2289 source, 2533 target) ; Learning rate..."
PEER_LINE = re.compile(
    r"Step = \d+ ; steps/s = [\d.]+, tokens/s = \d+ \(\d+ source, (\d+) target\)"
)
# "... training.callbacks: step 40/~356 (11%) | loss 5.1 | lr 4e-3 | 7,890 target tok/s | ..."
OUR_LINE = re.compile(
    r"training\.callbacks: step [\d,]+/\S+ \(\d+%\) \|.*?\| ([\d,]+) target tok/s"
)


def peer_rates(log_text: str) -> list[float]:
    """Target tokens/s of each report in an OpenNMT-tf training log, the first left out."""
    return [float(match.group(1)) for match in PEER_LINE.finditer(log_text)][1:]


def our_rates(log_text: str) -> list[float]:
    """Target tokens/s of each progress line of our training log, the first left out.

    A line every 20 updates, each over the wall time since the previous line, as the
    peer's; the first (tracing, filling the shuffle buffer) is left out, as the peer's is.
    """
    return [float(m.group(1).replace(",", "")) for m in OUR_LINE.finditer(log_text)][1:]


def peer_environment(workdir: Path) -> Path:
    """A virtual environment with OpenNMT-tf 2.32 and TensorFlow 2.13; returns its bin/."""
    venv = workdir / "opennmt-tf-venv"
    bin_dir = venv / "bin"
    if not (bin_dir / "onmt-main").is_file():
        print(f"installing {' '.join(PEER_PACKAGES)} into {venv}", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(bin_dir / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, *PEER_PACKAGES], check=True)
    return bin_dir


def prepare_inputs(workdir: Path, data: Path) -> dict[str, Path]:
    """The joint vocabulary, and the training data cut into its pieces for the peer."""
    import sentencepiece

    from translator.io import iter_lines
    from translator.pipelines import build_vocabulary, load_vocabulary

    vocab = workdir / "vocab"
    if not (vocab / "vocab.json").is_file():
        build_vocabulary(
            [data / "train.en.gz"], [data / "train.de.gz"], vocab, vocab_size=VOCAB_SIZE
        )
    load_vocabulary(vocab)  # checks it
    processor = sentencepiece.SentencePieceProcessor(model_file=str(vocab / "spm.model"))
    pieces = {side: workdir / f"train.{side}.pieces" for side in ("en", "de")}
    for side, path in pieces.items():
        if not path.is_file():
            encoded = processor.encode(list(iter_lines(data / f"train.{side}.gz")), out_type=str)
            path.write_text("".join(" ".join(p) + "\n" for p in encoded), encoding="utf-8")
    return {"vocab": vocab, "source": pieces["en"], "target": pieces["de"]}


def peer_config(workdir: Path, inputs: dict[str, Path], bin_dir: Path) -> Path:
    """The OpenNMT-tf run config, with a vocabulary converted by its `onmt-build-vocab`."""
    vocabulary = workdir / "onmt-vocab.txt"
    if not vocabulary.is_file():
        convert = ["--from_vocab", str(inputs["vocab"] / "spm.vocab")]
        convert += ["--from_format", "sentencepiece", "--save_vocab", str(vocabulary)]
        subprocess.run(
            [str(bin_dir / "onmt-build-vocab"), *convert], check=True, capture_output=True
        )
    (workdir / "onmt_model.py").write_text(PEER_MODEL, encoding="utf-8")
    files = {"train_features_file": inputs["source"], "train_labels_file": inputs["target"]}
    files |= {"source_vocabulary": vocabulary, "target_vocabulary": vocabulary}
    config = {
        "data": {k: str(v) for k, v in files.items()},
        "params": PEER_PARAMS,
        "train": PEER_TRAIN,
    }
    path = workdir / "onmt-config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def run_for(command: list[str], seconds: float, log: Path, level: str) -> str:
    """Runs `command` for `seconds` (then stops it); returns its output (kept in `log`)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": level}
    with log.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return log.read_text("utf-8", errors="replace")


def train_peer(workdir: Path, bin_dir: Path, config: Path, minutes: float, tag: str) -> dict:
    """OpenNMT-tf training for `minutes`; its logged target tokens/s."""
    model_dir = workdir / f"onmt-run-{tag}"
    shutil.rmtree(model_dir, ignore_errors=True)
    command = [str(bin_dir / "onmt-main"), "--model", str(workdir / "onmt_model.py")]
    command += ["--config", str(config), "--model_dir", str(model_dir), "train"]
    rates = peer_rates(run_for(command, minutes * 60, workdir / f"onmt-{tag}.log", "1"))
    if not rates:
        raise RuntimeError(f"OpenNMT-tf logged no training rate; see {workdir}/onmt-{tag}.log")
    return {"tokens_per_second": statistics.mean(rates), "reports": len(rates)}


def train_ours(workdir: Path, inputs: dict, data: Path, minutes: float, tag: str, shape) -> dict:
    """`translator train` at the comparison shape for `minutes`; its logged tokens/s."""
    run_dir = workdir / f"ours-{tag}"
    shutil.rmtree(run_dir, ignore_errors=True)
    settings = [
        f"data.train_source={data / 'train.en.gz'}",
        f"data.train_target={data / 'train.de.gz'}",
        "data.valid_source=",
        "data.valid_target=",
        f"data.vocabulary={inputs['vocab']}",
        f"train.max_minutes={minutes}",
        "train.log_every_steps=20",  # a throughput line every 20 updates
        "eval.every_steps=0",  # no validation (nor the peer), so no mid-run epochs
        "checkpoint.every_steps=1000000",  # as the peer's save_checkpoints_steps
        "checkpoint.average_last=0",
        *shape,
    ]
    command = harness.translator_command("train", f"--run-dir={run_dir}")
    command += [f"--set={item}" for item in settings]
    log = workdir / f"ours-{tag}.log"
    rates = our_rates(run_for(command, minutes * 60 + 120, log, "3"))
    if not rates:
        raise RuntimeError(f"translator train logged no rate; see {log}")
    metadata = run_dir / "model" / "metadata.json"
    precision = (
        json.loads(metadata.read_text("utf-8")).get("precision") if metadata.is_file() else "?"
    )
    return {
        "tokens_per_second": statistics.mean(rates),
        "reports": len(rates),
        "precision": precision,
    }


def main(argv: list[str] | None = None) -> int:
    parser = harness.make_parser("peers", __doc__)
    parser.add_argument("--workdir", type=Path, help=f"peer, data, runs ({DEFAULT_WORKDIR})")
    parser.add_argument("--minutes", type=float, help="per side and round (3; short 0.5)")
    parser.add_argument("--rounds", type=int, help="rounds of ours-then-peer (2; short 1)")
    args = harness.parse(parser, argv, minutes=(3.0, 0.5), rounds=(2, 1))
    data = harness.find_data(args.data)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as scratch:
        workdir = (args.workdir or (Path(scratch) if args.short else DEFAULT_WORKDIR)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        inputs = prepare_inputs(workdir, data)
        if not args.short:
            bin_dir = peer_environment(workdir)
            config = peer_config(workdir, inputs, bin_dir)
        shape = (*OUR_SHAPE, "model.preset=tiny") if args.short else OUR_SHAPE
        ours, peer = [], []
        for index in range(args.rounds):
            ours.append(train_ours(workdir, inputs, data, args.minutes, f"r{index}", shape))
            print(f"round {index + 1}: ours {ours[-1]['tokens_per_second']:,.0f} tok/s", flush=True)
            if not args.short:
                peer.append(train_peer(workdir, bin_dir, config, args.minutes, f"r{index}"))
                print(f"round {index + 1}: OpenNMT-tf {peer[-1]['tokens_per_second']:,.0f} tok/s")
    if not peer:
        print("the short mode skips the peer")
        return 0
    ratio = mean(ours) / mean(peer)
    harness.report_target("training tok/s vs OpenNMT-tf 2.32 (same run)", ratio, TARGET_RATIO, "x")
    seconds = time.perf_counter() - started
    harness.publish(args, "peers", peers_markdown, ours, peer, ratio, args.minutes, seconds)
    return 0


def mean(runs: list[dict]) -> float:
    return statistics.mean(run["tokens_per_second"] for run in runs)


def peers_markdown(
    ours: list[dict], peer: list[dict], ratio: float, minutes: float, seconds: float
):
    """The section: the template filled with this run's figures."""
    rows = [
        render(
            "round-row",
            round=i + 1,
            ours=o,
            peer=p,
            ratio=o["tokens_per_second"] / p["tokens_per_second"],
        )
        for i, (o, p) in enumerate(zip(ours, peer, strict=True))
    ]
    verdict = render("verdict-meets" if ratio >= TARGET_RATIO else "verdict-misses", ratio=ratio)
    return (
        render(
            "section",
            **harness.footer(),
            vocab_size=VOCAB_SIZE,
            batch_tokens=BATCH_TOKENS,
            max_length=MAX_LENGTH,
            minutes=minutes,
            target_ratio=TARGET_RATIO,
            verdict=verdict,
            rows="\n".join(rows),
            ours_mean=mean(ours),
            peer_mean=mean(peer),
            ratio=ratio,
            wall_minutes=seconds / 60,
        )
        + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
