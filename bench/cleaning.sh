#!/usr/bin/env bash
# What cleaning buys a noisy corpus (issue 49): Multi30k EN->DE train with 30% noise.
#
#   bash bench/cleaning.sh OUT [MINUTES]
#
# 1. Adds the seeded noise of bench/noisy_corpus.py to train (misaligned pairs, copies,
#    reversed pairs, boilerplate repeated ~1,000 times, truncated, overlong, mojibake).
# 2. Trains the MINUTES (5) recipe four times, each validated on Multi30k val (clean)
#    and tested on test_2016_flickr: on the noisy corpus, on it with --clean, on the
#    clean corpus alone, and on that with --clean (what cleaning costs a clean corpus).
# Nothing else should run on the machine meanwhile.
set -euo pipefail
OUT=$1 M=${2:-5}
PY=${PYTHON:-python}
DATA=${TRANSLATOR_DATA_MIRROR:-../shared/data/multi30k}
mkdir -p "$OUT"
$PY -m bench.noisy_corpus "$DATA/train.en.gz" "$DATA/train.de.gz" "$OUT/noisy" | tee "$OUT/noise.txt"
common=(--minutes "$M" --valid "$DATA/val.en.gz" "$DATA/val.de.gz"
  --test "$DATA/test_2016_flickr.en.gz" "$DATA/test_2016_flickr.de.gz")
$PY -m translator recipe --workdir "$OUT/noisy-run" --train "$OUT/noisy.en" "$OUT/noisy.de" \
  "${common[@]}" > "$OUT/noisy-run.log" 2>&1
$PY -m translator recipe --workdir "$OUT/cleaned-run" --train "$OUT/noisy.en" "$OUT/noisy.de" \
  --clean "${common[@]}" > "$OUT/cleaned-run.log" 2>&1
$PY -m translator recipe --workdir "$OUT/clean-run" --train "$DATA/train.en.gz" "$DATA/train.de.gz" \
  "${common[@]}" > "$OUT/clean-run.log" 2>&1
$PY -m translator recipe --workdir "$OUT/clean-cleaned-run" --train "$DATA/train.en.gz" \
  "$DATA/train.de.gz" --clean "${common[@]}" > "$OUT/clean-cleaned-run.log" 2>&1
for run in noisy cleaned clean clean-cleaned; do
  echo "$run: $(grep -h -E "^trained:|^report:" "$OUT/$run-run.log" | tr -s ' ' | paste -sd ' ')"
done
