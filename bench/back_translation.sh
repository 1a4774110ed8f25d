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
zcat "$DATA/train.en.gz" > "$OUT/train.en"; zcat "$DATA/train.de.gz" > "$OUT/train.de"
half=$(($(wc -l < "$OUT/train.en") / 2))
for side in en de; do
  head -n "$half" "$OUT/train.$side" > "$OUT/half1.$side"
  tail -n "+$((half + 1))" "$OUT/train.$side" > "$OUT/half2.$side"
done
[ -f "$OUT/vocab/vocab.json" ] || $T build-vocab --src "$OUT/train.en" --tgt "$OUT/train.de" \
  --vocab-size 8000 --out "$OUT/vocab" --user-symbols "<bt>"

config() {  # NAME VALID_SRC VALID_TGT TRAIN_ITEMS...: a run config of the corpora given
  local name=$1 vs=$2 vt=$3; shift 3
  {
    echo "data:"
    echo "  train:"
    for item in "$@"; do echo "    - $item"; done
    echo "  valid_source: $vs"
    echo "  valid_target: $vt"
    echo "  vocabulary: $OUT/vocab"
    echo "  pipeline: {max_source_length: 128, max_target_length: 128}"
    echo "eval: {bleu: true}"
  } > "$OUT/$name.yaml"
}
train() {  # NAME: trains OUT/NAME for MINUTES (skipped when done)
  [ -f "$OUT/$1/model/model.keras" ] || $T train --run-dir "$OUT/$1" \
    --config "$OUT/$1.yaml" --max-minutes "$M" > "$OUT/$1.log" 2>&1
}
bleu() {  # NAME: test BLEU of OUT/NAME, EN->DE
  local report="$OUT/eval-$1"
  $T evaluate --model "$OUT/$1" --src "$DATA/test_2016_flickr.en.gz" \
    --ref "$DATA/test_2016_flickr.de.gz" --report "$report" > /dev/null 2>&1
  $PY -c "import json,sys; print(f\"{json.load(open(sys.argv[1]))['scores']['bleu']['score']:.2f}\")" \
    "$report/report.json"
}
synthetic() {  # NAME [translate options]: OUT/NAME.en, the reverse model's English of half2.de
  [ -f "$OUT/$1.en" ] || $T translate --model "$OUT/reverse" -i "$OUT/half2.de" \
    -o "$OUT/$1.en" "${@:2}" 2> "$OUT/$1.log"
  tail -n 1 "$OUT/$1.log"
}

REAL="{source: $OUT/half1.en, target: $OUT/half1.de}"
config reverse "$DATA/val.de.gz" "$DATA/val.en.gz" "{source: $OUT/half1.de, target: $OUT/half1.en}"
train reverse
echo "reverse DE->EN model, ${M} minutes on the first half: test BLEU $(
  $T evaluate --model "$OUT/reverse" --src "$DATA/test_2016_flickr.de.gz" \
    --ref "$DATA/test_2016_flickr.en.gz" --report "$OUT/eval-reverse" > /dev/null 2>&1
  $PY -c "import json,sys; print(f\"{json.load(open(sys.argv[1]))['scores']['bleu']['score']:.2f}\")" \
    "$OUT/eval-reverse/report.json")"
echo "sampled: $(synthetic bt-sampled --sampling topk:10 --seed 1)"
echo "beam:    $(synthetic bt-beam --beam-size 4)"

config baseline "$DATA/val.en.gz" "$DATA/val.de.gz" "$REAL"
config sampled "$DATA/val.en.gz" "$DATA/val.de.gz" "$REAL" \
  "{source: $OUT/bt-sampled.en, target: $OUT/half2.de, tag: \"<bt>\"}"
config beam "$DATA/val.en.gz" "$DATA/val.de.gz" "$REAL" \
  "{source: $OUT/bt-beam.en, target: $OUT/half2.de, tag: \"<bt>\"}"
config real "$DATA/val.en.gz" "$DATA/val.de.gz" "$REAL" "{source: $OUT/half2.en, target: $OUT/half2.de}"
for name in baseline sampled beam real; do train "$name"; done

echo "EN->DE, ${M} minutes each (test_2016_flickr BLEU, beam 4):"
echo "  first half only: $(bleu baseline)"
echo "  + sampled back-translations (<bt>): $(bleu sampled)"
echo "  + beam back-translations (<bt>): $(bleu beam)"
echo "  + the real second half: $(bleu real)"
