#!/usr/bin/env bash
# Start from a pretrained model (issue 48): a domain shift inside Multi30k.
#
#   bash bench/pretrained.sh OUT [PRETRAIN_MINUTES] [MINUTES]
#
# 1. Splits Multi30k EN->DE by topic (bench/topic_split.py: water, 2,756 training pairs).
# 2. Pretrains PRETRAIN_MINUTES (15) on the rest, in a shape Marian can express
#    (Marian's sinusoid table, a zero start embedding), validated on the rest of val.
# 3. Writes it in Marian's format (`translator export --format marian`) and imports that
#    (`translator import marian`): the OPUS-MT path.
# 4. Fine-tunes the import MINUTES (5) on the topic's training pairs, and trains a model
#    from scratch for the same MINUTES on them; both validate on the topic's val pairs.
# 5. Scores the pretrained model (as trained, and as imported), the fine-tuned one and the
#    scratch one on the topic's sentences of test_2016_flickr (beam 4, as the recipe).
# Nothing else should run on the machine meanwhile.
set -euo pipefail
OUT=$1 PRETRAIN=${2:-15} M=${3:-5}
PY=${PYTHON:-python}
mkdir -p "$OUT"
$PY -m bench.topic_split "$OUT/data" | tee "$OUT/split.txt"
D=$OUT/data
MARIAN_SHAPE=(--set model.overrides.sinusoid_layout=marian --set model.overrides.zero_start_embedding=true)
$PY -m translator recipe --workdir "$OUT/pretrain" --minutes "$PRETRAIN" --langs en-de \
  --train "$D/rest.train.en" "$D/rest.train.de" --valid "$D/rest.val.en" "$D/rest.val.de" \
  --test "$D/topic.test.en" "$D/topic.test.de" "${MARIAN_SHAPE[@]}" > "$OUT/pretrain.log" 2>&1
$PY -m translator export --format marian --model "$OUT/pretrain/run" --out "$OUT/marian" --overwrite
$PY -m translator import marian "$OUT/marian" --out "$OUT/imported" | tee "$OUT/import.txt"
$PY -m translator recipe --workdir "$OUT/finetune" --minutes "$M" --langs en-de --init-from "$OUT/imported" \
  --train "$D/topic.train.en" "$D/topic.train.de" --valid "$D/topic.val.en" "$D/topic.val.de" \
  --test "$D/topic.test.en" "$D/topic.test.de" > "$OUT/finetune.log" 2>&1
$PY -m translator recipe --workdir "$OUT/scratch" --minutes "$M" --langs en-de \
  --train "$D/topic.train.en" "$D/topic.train.de" --valid "$D/topic.val.en" "$D/topic.val.de" \
  --test "$D/topic.test.en" "$D/topic.test.de" > "$OUT/scratch.log" 2>&1
for model in pretrain/run imported; do
  $PY -m translator evaluate --model "$OUT/$model" --src "$D/topic.test.en" --ref "$D/topic.test.de" \
    --beam-size 4 --report "$OUT/reports/${model%/run}" > "$OUT/evaluate-${model%/run}.log" 2>&1
done
grep -h "BLEU" "$OUT"/evaluate-*.log "$OUT"/finetune.log "$OUT"/scratch.log | grep -E "report|BLEU" || true
