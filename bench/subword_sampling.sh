#!/usr/bin/env bash
# What subword sampling buys a small corpus (issue 51): time-fair recipe trials.
#
#   bash bench/subword_sampling.sh OUT [PAIRS] [MINUTES] [PAIR] [TRIAL ...]
#
# A seeded subset of PAIRS (3000) Multi30k training pairs in direction PAIR (en-de),
# trained by the MINUTES (5) recipe once per TRIAL (default: off mild strong), the plan
# left to choose everything a trial does not set:
#   off      no sampling                     control  nbest 8, alpha 100 (the one best:
#   weak     nbest 8, alpha 2                         the sampling pipeline's own cost)
#   mild     nbest 8, alpha 0.5              seed2    off, another training seed (noise)
#   strong   nbest 8, alpha 0.1              vocabN   off, an N-piece vocabulary
#   few      nbest 2, alpha 0.5
# and a trial's suffixes: NAME-d0DIGITS at dropout 0.DIGITS (mild-d01, off-d025),
# NAME-sN with seed N for training and data, shuffle and draws (mild-s2).
# Each is validated on Multi30k val (greedy BLEU: what a choice is made on) and tested
# on test_2016_flickr (beam 4). Nothing else should run meanwhile.
set -euo pipefail
OUT=$1 PAIRS=${2:-3000} M=${3:-5} PAIR=${4:-en-de}
shift $(($# < 4 ? $# : 4))
TRIALS=("$@")
[ ${#TRIALS[@]} -gt 0 ] || TRIALS=(off mild strong)
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
sampling=(--set data.pipeline.subword_nbest=8)
settings() {  # TRIAL -> its --set arguments
  local trial=$1
  while [[ $trial =~ ^(.+)-(d0([0-9]+)|s([0-9]+))$ ]]; do
    trial=${BASH_REMATCH[1]}
    if [ -n "${BASH_REMATCH[3]}" ]; then
      echo --set "model.overrides.dropout=0.${BASH_REMATCH[3]}"
    else
      echo --set "train.seed=${BASH_REMATCH[4]}" --set "data.pipeline.seed=${BASH_REMATCH[4]}"
    fi
  done
  case $trial in
    off) ;;
    weak) echo "${sampling[@]}" --set data.pipeline.subword_alpha=2.0 ;;
    mild) echo "${sampling[@]}" --set data.pipeline.subword_alpha=0.5 ;;
    strong) echo "${sampling[@]}" --set data.pipeline.subword_alpha=0.1 ;;
    few) echo --set data.pipeline.subword_nbest=2 --set data.pipeline.subword_alpha=0.5 ;;
    control) echo "${sampling[@]}" --set data.pipeline.subword_alpha=100 ;;
    seed2) echo --set train.seed=2 ;;
    vocab[1-9]*) echo --vocab-size "${trial#vocab}" ;;
    *) echo "unknown trial: $1" >&2; exit 2 ;;
  esac
}
for trial in "${TRIALS[@]}"; do
  settings "$trial" > /dev/null  # an unknown name stops before anything runs
done
for trial in "${TRIALS[@]}"; do
  name="$PAIR-$PAIRS-${M}min-$trial"
  # shellcheck disable=SC2046  # settings prints separate words
  $PY -m translator recipe --workdir "$OUT/$name" "${common[@]}" $(settings "$trial") \
    > "$OUT/$name.log" 2>&1
  echo "$name: $(grep -h -E "^plan:|^trained:|^report:" "$OUT/$name.log" | tr -s ' ' | paste -sd ' ')"
done
