#!/usr/bin/env bash
# What practitioners do after a first model, measured on Multi30k with the planner's budgets:
#
#   bash bench/after_first_model.sh DATA OUT MINUTES
#
# 1. Bidirectional EN<->DE: one model trained on both directions, each corpus tagged with
#    its target language (<2de>, <2en>), for 2 x MINUTES, beside two one-direction models
#    of MINUTES each (the same total minutes).
# 2. Fine-tuning: a model trained MINUTES on the first half of the training pairs, then
#    fine-tuned (--init-from) MINUTES on the second half, beside one trained 2 x MINUTES on
#    all pairs.
# Every model is scored on test_2016_flickr with beam 4 (cased sacreBLEU); the lines
# printed at the end go into bench/RESULTS.md. One joint vocabulary (8,000 pieces, with
# the two tags) serves every run. Nothing else should run on the machine meanwhile.
set -euo pipefail
DATA=$1 OUT=$2 M=$3
PY=${PYTHON:-python}
T="$PY -m translator"
mkdir -p "$OUT"
source "$(dirname "$0")/multi30k_runs.sh"
halves
vocab "<2de>,<2en>"

EN="{source: $OUT/train.en, target: $OUT/train.de}"
DE="{source: $OUT/train.de, target: $OUT/train.en}"
config en-de "$DATA/val.en.gz" "$DATA/val.de.gz" "" "$EN"
config de-en "$DATA/val.de.gz" "$DATA/val.en.gz" "" "$DE"
config both "$DATA/val.en.gz" "$DATA/val.de.gz" "<2de>" \
  "{source: $OUT/train.en, target: $OUT/train.de, tag: \"<2de>\"}" \
  "{source: $OUT/train.de, target: $OUT/train.en, tag: \"<2en>\"}"
config half1 "$DATA/val.en.gz" "$DATA/val.de.gz" "" "{source: $OUT/half1.en, target: $OUT/half1.de}"
config tuned "$DATA/val.en.gz" "$DATA/val.de.gz" "" "{source: $OUT/half2.en, target: $OUT/half2.de}"
config all "$DATA/val.en.gz" "$DATA/val.de.gz" "" "$EN"

train en-de "$M"
train de-en "$M"
train both "$((2 * M))"
train half1 "$M"
train tuned "$M" --init-from "$OUT/half1"
train all "$((2 * M))"

echo "bidirectional, ${M}+${M} minutes vs $((2 * M)) minutes (test_2016_flickr BLEU, beam 4):"
echo "  EN->DE: one-direction $(bleu en-de en de), bidirectional $(bleu both en de --target-lang de)"
echo "  DE->EN: one-direction $(bleu de-en de en), bidirectional $(bleu both de en --target-lang en)"
echo "fine-tuning, EN->DE (test_2016_flickr BLEU, beam 4):"
echo "  first half, ${M} minutes: $(bleu half1 en de)"
echo "  + fine-tuned ${M} minutes on the second half: $(bleu tuned en de)"
echo "  all pairs, $((2 * M)) minutes: $(bleu all en de)"
