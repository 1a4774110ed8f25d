#!/usr/bin/env bash
# Training with tf.data's autotuning on the inputs (as before 8d90160) against without it
# (`training.inputs._untuned`, the product since): the same 300 updates of the "small"
# preset, 4,096 batch tokens, on Multi30k EN->DE, taking turns, a fresh process each.
# The batches are the same (same target tokens, same loss), so tokens/s compares speed.
# Figures: bench/RESULTS.md, "The test suite's time".
set -euo pipefail
cd "$(dirname "$0")/.." && . .venv/bin/activate
export TRANSLATOR_DATA_MIRROR="${TRANSLATOR_DATA_MIRROR:-$(cd .. && pwd)/shared/data/multi30k}"
REPO=$(pwd); W=${1:-/tmp/input_autotune}; ROUNDS=${2:-2}
mkdir -p $W; cd $W
translator data multi30k --dest data >/dev/null
[ -d vocab ] || translator build-vocab --src data/train.en.gz --tgt data/train.de.gz \
    --vocab-size 8000 --out vocab >/dev/null
sed -e 's#data/multi30k/vocab#vocab#; s#data/multi30k/#data/#' \
    "$REPO/training/configs/multi30k_en_de.yaml" > config.yaml
# "tuned": the inputs' datasets as they come (tf.data's autotuning on, its default).
DRIVE='import sys, training.inputs as i
if sys.argv.pop(1) == "tuned": i._untuned = lambda dataset: dataset
from translator.cli import main; sys.exit(main(sys.argv[1:]))'
for round in $(seq 1 "$ROUNDS"); do for arm in tuned untuned; do
    rm -rf run-$arm-$round; started=$(date +%s.%N)
    PYTHONPATH=$REPO python -c "$DRIVE" $arm train --config config.yaml --run-dir run-$arm-$round \
        --no-plan --set model.preset=small --set data.pipeline.batch_tokens=4096 \
        --set train.max_steps=300 --set train.max_minutes=0 --set eval.bleu=false \
        --set eval.every_steps=0 --set checkpoint.every_steps=1000 > log-$arm-$round.txt 2>&1
    wall=$(python -c "import time; print(f'{time.time() - $started:.1f}')")
    python - run-$arm-$round "$arm $round" "$wall" <<'PY'
import json, sys
record = json.load(open(f"{sys.argv[1]}/model/metadata.json"))
seconds, tokens = record["training_seconds"], record["target_tokens"]
print(f"{sys.argv[2]}: wall {sys.argv[3]} s, training {seconds} s, {tokens:,} target tokens, "
      f"{tokens / seconds:,.0f} tokens/s")
PY
done; done
