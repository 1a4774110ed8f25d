#!/usr/bin/env bash
# What subword sampling buys a small corpus (issue 51): time-fair recipe trials.
#
#   bash bench/subword_sampling.sh OUT [PAIRS] [MINUTES] [PAIR]
#
# A seeded subset of PAIRS (3000) Multi30k training pairs in direction PAIR (en-de),
# trained by the MINUTES (5) recipe three times, the plan left to choose everything else:
# without sampling, and with data.pipeline.subword_nbest 8 at subword_alpha 0.5 (mild)
# and 0.1 (strong). Each is validated on Multi30k val (greedy BLEU: what a choice is
# made on) and tested on test_2016_flickr (beam 4). Nothing else should run meanwhile.
set -euo pipefail
OUT=$1 PAIRS=${2:-3000} M=${3:-5} PAIR=${4:-en-de}
PY=${PYTHON:-python}
DATA=${TRANSLATOR_DATA_MIRROR:-../shared/data/multi30k}
SRC=${PAIR%-*} TGT=${PAIR#*-}
mkdir -p "$OUT"
$PY - "$DATA" "$OUT" "$PAIRS" <<'EOF'
import gzip, random, sys
from pathlib import Path
data, out, pairs = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
lines = {lang: gzip.open(data / f"train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
         for lang in ("en", "de")}
keep = sorted(random.Random(1).sample(range(len(lines["en"])), pairs))  # as bench.planner
for lang, text in lines.items():
    (out / f"train-{pairs}.{lang}").write_text("".join(text[i] + "\n" for i in keep), "utf-8")
EOF
common=(--minutes "$M" --train "$OUT/train-$PAIRS.$SRC" "$OUT/train-$PAIRS.$TGT"
  --valid "$DATA/val.$SRC.gz" "$DATA/val.$TGT.gz"
  --test "$DATA/test_2016_flickr.$SRC.gz" "$DATA/test_2016_flickr.$TGT.gz")
run() {  # NAME [--set ...]
  local name=$1; shift
  $PY -m translator recipe --workdir "$OUT/$PAIR-$PAIRS-${M}min-$name" "${common[@]}" "$@" \
    > "$OUT/$PAIR-$PAIRS-${M}min-$name.log" 2>&1
}
run off
run mild --set data.pipeline.subword_nbest=8 --set data.pipeline.subword_alpha=0.5
run strong --set data.pipeline.subword_nbest=8 --set data.pipeline.subword_alpha=0.1
for name in off mild strong; do
  log="$OUT/$PAIR-$PAIRS-${M}min-$name.log"
  echo "$PAIR $PAIRS ${M}min $name: $(grep -h -E "^plan:|^trained:|^report:" "$log" | tr -s ' ' | paste -sd ' ')"
done
