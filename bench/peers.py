"""Training speed against OpenNMT-tf 2.32, both measured here, alternating, in one run.

    python -m bench.peers                       # full: writes the "peers" section
    python -m bench.peers --minutes 2 --rounds 1
    python -m bench.peers --short               # our side only (no peer install); prints

The comparison shape of the issue: a 3+3-layer Transformer, d_model 256, 4 heads, FFN
1024, shared embeddings and tied output projection, a joint 8,000-piece SentencePiece
vocabulary, 4,096-token batches, sequences of at most 128 pieces, on Multi30k EN-DE.

The peer is installed by this benchmark into its own virtual environment under
`--workdir` (OpenNMT-tf 2.32 with TensorFlow 2.13; never into the project's environment)
and trains on the same sentences cut into the same SentencePiece pieces, with a
vocabulary file converted from the same model by its own `onmt-build-vocab`. Each round
trains ours (`translator train`, the default precision `auto`) and then the peer for the
same minutes; each side's target tokens/s is what its own training log reports, the first
report of a run (graph tracing) left out. The ratio is over the rounds' means.

The section's words are in bench/templates/peers.md; this module measures the figures and
fills them in.
"""

from __future__ import annotations

import argparse
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

if __package__ in (None, ""):  # run as `python bench/peers.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pipeline import find_data
from bench.results import (
    TEMPLATES,
    bind_template,
    command_line,
    machine_summary,
    report_target,
    today,
    update_section,
)

TARGET_RATIO = 1.5
# The words of the section, filled in by `render`.
TEMPLATE = TEMPLATES / "peers.md"
template_parts, render = bind_template(TEMPLATE)
PEER_PACKAGES = ("OpenNMT-tf==2.32.0", "tensorflow-cpu==2.13.*")
DEFAULT_WORKDIR = Path("runs/bench-peers")
VOCAB_SIZE = 8000
BATCH_TOKENS = 4096
MAX_LENGTH = 128
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
        num_layers=3,
        num_units=256,
        num_heads=4,
        ffn_inner_dim=1024,
        dropout=0.1,
        attention_dropout=0.0,
        ffn_dropout=0.0,
        share_embeddings=opennmt.models.EmbeddingsSharingLevel.ALL,
    )
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="directory with the Multi30k files (default: the mirror)")
    parser.add_argument(
        "--workdir",
        type=Path,
        help=f"where the peer's environment, data and runs go (default: {DEFAULT_WORKDIR}; "
        "short: a temporary directory)",
    )
    parser.add_argument(
        "--minutes", type=float, help="training minutes per side and round (default 3)"
    )
    parser.add_argument("--rounds", type=int, help="rounds of ours-then-peer (default 2)")
    parser.add_argument(
        "--short",
        action="store_true",
        help="our side only, the tiny model for 0.5 minutes, no peer install; RESULTS.md untouched",
    )
    return parser.parse_args(argv)


# ---- The peer's environment and inputs -----------------------------------------------


def peer_environment(workdir: Path) -> Path:
    """A virtual environment with OpenNMT-tf 2.32 and TensorFlow 2.13; returns its bin/."""
    venv = workdir / "opennmt-tf-venv"
    bin_dir = venv / "bin"
    if (bin_dir / "onmt-main").is_file():
        return bin_dir
    print(f"installing {' '.join(PEER_PACKAGES)} into {venv}", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, *PEER_PACKAGES], check=True)
    return bin_dir


def prepare_inputs(workdir: Path, data: Path) -> dict[str, Path]:
    """The joint vocabulary, and the training data cut into its pieces for the peer."""
    from translator.pipelines import build_vocabulary, load_vocabulary
    from translator.pipelines.corpus import iter_lines

    vocab = workdir / "vocab"
    if not (vocab / "vocab.json").is_file():
        build_vocabulary(
            [data / "train.en.gz"], [data / "train.de.gz"], vocab, vocab_size=VOCAB_SIZE
        )
    pieces = {side: workdir / f"train.{side}.pieces" for side in ("en", "de")}
    if not all(path.is_file() for path in pieces.values()):
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_file=str(vocab / "spm.model"))
        for side, path in pieces.items():
            lines = list(iter_lines(data / f"train.{side}.gz"))
            encoded = processor.encode(lines, out_type=str)
            path.write_text("".join(" ".join(p) + "\n" for p in encoded), encoding="utf-8")
    load_vocabulary(vocab)  # checks it
    return {"vocab": vocab, "source": pieces["en"], "target": pieces["de"]}


def peer_config(workdir: Path, inputs: dict[str, Path], bin_dir: Path) -> Path:
    """The OpenNMT-tf run config: same batches, lengths, optimizer family, no validation."""
    vocabulary = workdir / "onmt-vocab.txt"
    if not vocabulary.is_file():
        subprocess.run(
            [
                str(bin_dir / "onmt-build-vocab"),
                "--from_vocab",
                str(inputs["vocab"] / "spm.vocab"),
                "--from_format",
                "sentencepiece",
                "--save_vocab",
                str(vocabulary),
            ],
            check=True,
            capture_output=True,
        )
    (workdir / "onmt_model.py").write_text(PEER_MODEL, encoding="utf-8")
    config = {
        "data": {
            "train_features_file": str(inputs["source"]),
            "train_labels_file": str(inputs["target"]),
            "source_vocabulary": str(vocabulary),
            "target_vocabulary": str(vocabulary),
        },
        "params": {
            "optimizer": "Adam",
            "optimizer_params": {"beta_1": 0.9, "beta_2": 0.98, "epsilon": 1e-9},
            "learning_rate": 2.0,
            "decay_type": "NoamDecay",
            "decay_params": {"model_dim": 256, "warmup_steps": 600},
            "label_smoothing": 0.1,
        },
        "train": {
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
        },
    }
    path = workdir / "onmt-config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


# ---- One timed run of each side ----------------------------------------------------------


def run_for(command: list[str], seconds: float, log: Path, env: dict[str, str]) -> None:
    """Runs `command` for `seconds` (then stops it), its output into `log`."""
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


# "Step = 20 ; steps/s = 0.70, tokens/s = 4822 (2289 source, 2533 target) ; Learning rate..."
PEER_LINE = re.compile(
    r"Step = (\d+) ; steps/s = [\d.]+, tokens/s = \d+ \((\d+) source, (\d+) target\)"
)


def peer_rates(log_text: str) -> list[float]:
    """Target tokens/s of each report in an OpenNMT-tf training log, the first left out."""
    rates = [float(match.group(3)) for match in PEER_LINE.finditer(log_text)]
    return rates[1:]


def train_peer(workdir: Path, bin_dir: Path, config: Path, minutes: float, tag: str) -> dict:
    """OpenNMT-tf training for `minutes`; its logged target tokens/s."""
    model_dir = workdir / f"onmt-run-{tag}"
    shutil.rmtree(model_dir, ignore_errors=True)
    log = workdir / f"onmt-{tag}.log"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"}
    command = [
        str(bin_dir / "onmt-main"),
        "--model",
        str(workdir / "onmt_model.py"),
        "--config",
        str(config),
        "--model_dir",
        str(model_dir),
        "train",
    ]
    run_for(command, minutes * 60, log, env)
    rates = peer_rates(log.read_text("utf-8", errors="replace"))
    if not rates:
        raise RuntimeError(f"OpenNMT-tf logged no training rate; see {log}")
    return {"tokens_per_second": statistics.mean(rates), "reports": len(rates), "log": log}


def train_ours(
    workdir: Path,
    inputs: dict[str, Path],
    data: Path,
    minutes: float,
    tag: str,
    shape: tuple[str, ...] = OUR_SHAPE,
) -> dict:
    """`translator train` at the comparison shape for `minutes`; its logged tokens/s."""
    run_dir = workdir / f"ours-{tag}"
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "translator",
        "train",
        f"--run-dir={run_dir}",
        f"--set=data.train_source={data / 'train.en.gz'}",
        f"--set=data.train_target={data / 'train.de.gz'}",
        "--set=data.valid_source=",
        "--set=data.valid_target=",
        f"--set=data.vocabulary={inputs['vocab']}",
        f"--set=train.max_minutes={minutes}",
        "--set=train.log_every_steps=20",  # a throughput line every 20 updates
        "--set=eval.every_steps=0",  # no validation (nor the peer), so no mid-run epochs
        "--set=checkpoint.every_steps=1000000",  # as the peer's save_checkpoints_steps
        "--set=checkpoint.average_last=0",
        *(f"--set={item}" for item in shape),
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    run_for(command, minutes * 60 + 120, workdir / f"ours-{tag}.log", env)
    rates = our_rates((workdir / f"ours-{tag}.log").read_text("utf-8", errors="replace"))
    if not rates:
        raise RuntimeError(f"translator train logged no rate; see {workdir / f'ours-{tag}.log'}")
    metadata = run_dir / "model" / "metadata.json"
    precision = (
        json.loads(metadata.read_text("utf-8")).get("precision") if metadata.is_file() else "?"
    )
    return {
        "tokens_per_second": statistics.mean(rates),
        "reports": len(rates),
        "precision": precision,
    }


# "... training.callbacks: step 40/~356 (11%) | loss 5.1 | lr 4e-3 | 7,890 target tok/s | ..."
OUR_LINE = re.compile(
    r"training\.callbacks: step [\d,]+/\S+ \(\d+%\) \|.*?\| ([\d,]+) target tok/s"
)


def our_rates(log_text: str) -> list[float]:
    """Target tokens/s of each progress line of our training log, the first left out.

    A line every 20 updates (`train.log_every_steps`), each the target tokens of its 20
    updates over the wall time since the previous line: everything the run did in
    between counts, as in the peer's own figure. The first (graph tracing, filling the
    shuffle buffer) is left out, as the peer's is.
    """
    rates = [float(match.group(1).replace(",", "")) for match in OUR_LINE.finditer(log_text)]
    return rates[1:]


# ---- Main ------------------------------------------------------------------------------


def alternate(
    workdir: Path, data: Path, minutes: float, rounds: int, short: bool
) -> tuple[list[dict], list[dict]]:
    """Rounds of ours, then the peer (not in short mode); each side's runs."""
    inputs = prepare_inputs(workdir, data)
    bin_dir = config = None
    if not short:
        bin_dir = peer_environment(workdir)
        config = peer_config(workdir, inputs, bin_dir)
    shape = (*OUR_SHAPE, "model.preset=tiny") if short else OUR_SHAPE
    ours, peer = [], []
    for index in range(rounds):
        ours.append(train_ours(workdir, inputs, data, minutes, f"r{index}", shape))
        print(f"round {index + 1}: ours {ours[-1]['tokens_per_second']:,.0f} tok/s", flush=True)
        if bin_dir is not None:
            peer.append(train_peer(workdir, bin_dir, config, minutes, f"r{index}"))
            rate = peer[-1]["tokens_per_second"]
            print(f"round {index + 1}: OpenNMT-tf {rate:,.0f} tok/s", flush=True)
    return ours, peer


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    minutes = args.minutes or (0.5 if args.short else 3.0)
    rounds = args.rounds or (1 if args.short else 2)
    data = find_data(args.data)
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as scratch:
        workdir = (args.workdir or (Path(scratch) if args.short else DEFAULT_WORKDIR)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        ours, peer = alternate(workdir, data, minutes, rounds, args.short)
    ours_mean = statistics.mean(run["tokens_per_second"] for run in ours)
    if not peer:
        print(f"ours {ours_mean:,.0f} target tok/s; the short mode skips the peer")
        return 0
    peer_mean = statistics.mean(run["tokens_per_second"] for run in peer)
    ratio = ours_mean / peer_mean
    print(f"ours {ours_mean:,.0f}, OpenNMT-tf {peer_mean:,.0f} target tok/s: {ratio:.2f}x")
    report_target("training tok/s vs OpenNMT-tf 2.32 (same run)", ratio, TARGET_RATIO, "x")
    update_section(
        "peers", peers_markdown(ours, peer, ratio, minutes, time.perf_counter() - started)
    )
    return 0


def peers_markdown(
    ours: list[dict], peer: list[dict], ratio: float, minutes: float, seconds: float
) -> str:
    """The RESULTS.md section: the template filled with this run's figures."""
    rows = [
        render(
            "round-row",
            round=index + 1,
            ours=o["tokens_per_second"],
            ours_reports=o["reports"],
            precision=o["precision"],
            peer=p["tokens_per_second"],
            peer_reports=p["reports"],
            ratio=o["tokens_per_second"] / p["tokens_per_second"],
        )
        for index, (o, p) in enumerate(zip(ours, peer, strict=True))
    ]
    verdict = render("verdict-meets" if ratio >= TARGET_RATIO else "verdict-misses", ratio=ratio)
    section = render(
        "section",
        vocab_size=VOCAB_SIZE,
        batch_tokens=BATCH_TOKENS,
        max_length=MAX_LENGTH,
        minutes=minutes,
        target_ratio=TARGET_RATIO,
        verdict=verdict,
        rows="\n".join(rows),
        ours_mean=statistics.mean(o["tokens_per_second"] for o in ours),
        peer_mean=statistics.mean(p["tokens_per_second"] for p in peer),
        ratio=ratio,
        command=command_line(),
        wall_minutes=seconds / 60,
        date=today(),
        machine=machine_summary(),
    )
    return section + "\n"


if __name__ == "__main__":
    sys.exit(main())
