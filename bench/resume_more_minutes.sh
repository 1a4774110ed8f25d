#!/usr/bin/env bash
# A finished 2-minute run given 4 minutes in all (`--max-minutes 4` on its run directory),
# against a run planned for 4 minutes from the start. Multi30k EN->DE, validation BLEU.
set -euo pipefail
cd "$(dirname "$0")/.." && . .venv/bin/activate
export TRANSLATOR_DATA_MIRROR="${TRANSLATOR_DATA_MIRROR:-$(cd .. && pwd)/shared/data/multi30k}"
W=${1:-/tmp/resume_more_minutes}; rm -rf $W; mkdir -p $W; cd $W
translator data multi30k --dest data/multi30k >/dev/null
translator build-vocab --src data/multi30k/train.en.gz --tgt data/multi30k/train.de.gz \
    --vocab-size 8000 --out data/multi30k/vocab >/dev/null
translator train --run-dir straight --max-minutes 4 2>straight.log | tee straight.out
translator train --run-dir extended --max-minutes 2 2>extended1.log | tee extended1.out
cp extended/model/metadata.json extended1.json
translator train --run-dir extended --max-minutes 4 2>extended2.log | tee extended2.out
grep "train.max_minutes" extended2.log || true
python - <<'PY'
import json
for name, path in [("straight 4", "straight/model/metadata.json"), ("2 (finished)", "extended1.json"), ("2 then 4", "extended/model/metadata.json")]:
    m = json.load(open(path))
    print(f"{name}: step {m['step']}, best validation BLEU {m['best_validation_bleu']}, budget {m['budget_seconds']} s")
PY
