#!/usr/bin/env bash
# Back-translation, simulated on Multi30k (Sennrich et al. 2016; Edunov et al. 2018):
#
#   bash bench/back_translation.sh DATA OUT MINUTES
#
# The first half of the training pairs is the parallel data; the German side of the second
# half is treated as monolingual text. A reverse DE->EN model trained MINUTES on the first
# half translates that German by sampling (top-k 10) and by beam search (beam 4); then
# EN->DE models train MINUTES each on:
#   - the first half alone (the baseline);
#   - the first half + the sampled synthetic pairs, tagged <bt> (weights 1:1);
#   - the first half + the beam synthetic pairs, tagged <bt> (weights 1:1);
#   - the first half + the real second half (the ceiling: what the German was worth).
# Every model is scored on test_2016_flickr with beam 4 (cased sacreBLEU); the lines
# printed at the end go into bench/RESULTS.md. One joint vocabulary (8,000 pieces, with
# the tag) serves every run. Nothing else should run on the machine meanwhile.
set -euo pipefail
DATA=$1 OUT=$2 M=$3
PY=${PYTHON:-python}
T="$PY -m translator"
mkdir -p "$OUT"
source "$(dirname "$0")/multi30k_runs.sh"
halves
vocab "<bt>"

synthetic() {  # NAME [translate options]: OUT/NAME.en, the reverse model's English of half2.de
  [ -f "$OUT/$1.en" ] || $T translate --model "$OUT/reverse" -i "$OUT/half2.de" \
    -o "$OUT/$1.en" "${@:2}" 2> "$OUT/$1.log"
  tail -n 1 "$OUT/$1.log"
}

REAL="{source: $OUT/half1.en, target: $OUT/half1.de}"
config reverse "$DATA/val.de.gz" "$DATA/val.en.gz" "" "{source: $OUT/half1.de, target: $OUT/half1.en}"
train reverse "$M"
echo "reverse DE->EN model, ${M} minutes on the first half: test BLEU $(bleu reverse de en)"
echo "sampled: $(synthetic bt-sampled --sampling topk:10 --seed 1)"
echo "beam:    $(synthetic bt-beam --beam-size 4)"

config baseline "$DATA/val.en.gz" "$DATA/val.de.gz" "" "$REAL"
config sampled "$DATA/val.en.gz" "$DATA/val.de.gz" "" "$REAL" \
  "{source: $OUT/bt-sampled.en, target: $OUT/half2.de, tag: \"<bt>\"}"
config beam "$DATA/val.en.gz" "$DATA/val.de.gz" "" "$REAL" \
  "{source: $OUT/bt-beam.en, target: $OUT/half2.de, tag: \"<bt>\"}"
config real "$DATA/val.en.gz" "$DATA/val.de.gz" "" "$REAL" \
  "{source: $OUT/half2.en, target: $OUT/half2.de}"
for name in baseline sampled beam real; do train "$name" "$M"; done

echo "EN->DE, ${M} minutes each (test_2016_flickr BLEU, beam 4):"
echo "  first half only: $(bleu baseline en de)"
echo "  + sampled back-translations (<bt>): $(bleu sampled en de)"
echo "  + beam back-translations (<bt>): $(bleu beam en de)"
echo "  + the real second half: $(bleu real en de)"
