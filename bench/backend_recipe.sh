#!/usr/bin/env bash
# The Multi30k recipe on each Keras backend, taking turns (issue 47):
#
#   bash bench/backend_recipe.sh OUT MINUTES [ROUNDS]
#
# Each round runs `translator recipe --minutes MINUTES` (Multi30k EN->DE from
# $TRANSLATOR_DATA_MIRROR) on TensorFlow, then with --set train.backend=jax, each in a
# fresh work directory, and prints one line per run: the updates trained, the training's
# real target tokens per second (the model's metadata: tokens / training seconds), the
# planned shape and test_2016_flickr BLEU (beam 4, the recipe's report). The lines go
# into bench/RESULTS.md. Nothing else should run on the machine meanwhile.
set -euo pipefail
OUT=$1 M=$2 ROUNDS=${3:-1}
PY=${PYTHON:-python}
mkdir -p "$OUT"
for round in $(seq 1 "$ROUNDS"); do
  for backend in tensorflow jax; do
    dir="$OUT/$backend-$round"
    rm -rf "$dir"
    $PY -m translator recipe --workdir "$dir" --minutes "$M" --set "train.backend=$backend" \
      > "$dir.log" 2>&1
    $PY - "$dir" "$backend" <<'EOF'
import json
import re
import sys
from pathlib import Path

work, backend = Path(sys.argv[1]), sys.argv[2]
metadata = json.loads((work / "run" / "model" / "metadata.json").read_text())
plan = json.loads((work / "run" / "plan.json").read_text())
log = Path(f"{work}.log").read_text()
bleu = re.search(r"BLEU ([\d.]+), chrF [\d.]+, TER [\d.]+ on \d+ sentences of test_2016_flickr", log)
rate = metadata["target_tokens"] / metadata["training_seconds"]
batch = next(c["value"] for c in plan["choices"] if c["key"] == "data.pipeline.batch_tokens")
print(
    f"| {backend} | {metadata['step']:,} | {rate:,.0f} | {plan['shape']['name']} "
    f"| {batch:,} | {bleu.group(1) if bleu else '?'} |"
)
EOF
  done
done
