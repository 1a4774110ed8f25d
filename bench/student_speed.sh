#!/usr/bin/env bash
# A teacher's and its student's beam-4 decoding speed, on our engine and on CTranslate2
# (float32 and int8), interleaved round by round on the same test set, same threads.
#
#   bash bench/student_speed.sh TEACHER_MODEL STUDENT_MODEL TEST_SOURCE OUT_DIR [ROUNDS]
#
# Each model is exported for CTranslate2 at both compute types first; each round then
# translates TEST_SOURCE with every (model, engine) in turn and prints the target tokens/s
# `translate` reports, into OUT_DIR/speeds.tsv. Nothing else should run meanwhile.
set -eu
mkdir -p "$4"
TEACHER=$(realpath "$1") STUDENT=$(realpath "$2") TEST=$(realpath "$3") OUT=$(realpath "$4")
ROUNDS=${5:-2}
export TF_CPP_MIN_LOG_LEVEL=2
for who in teacher student; do
  model=$TEACHER; [ $who = student ] && model=$STUDENT
  for kind in float32 int8; do
    [ -d "$OUT/$who-ct2-$kind" ] || translator export --format ctranslate2 --quantization $kind \
      --model "$model" --out "$OUT/$who-ct2-$kind" > /dev/null
  done
done
echo -e "round\tmodel\tengine\ttarget_tokens_per_second" > "$OUT/speeds.tsv"
for round in $(seq "$ROUNDS"); do
  for who in teacher student; do
    model=$TEACHER; [ $who = student ] && model=$STUDENT
    for engine in ours ct2-float32 ct2-int8; do
      target=$model; [ $engine != ours ] && target="$OUT/$who-$engine"
      translator translate --model "$target" -i "$TEST" -o "$OUT/hyp.$who.$engine" \
        --beam-size 4 2> "$OUT/log.$who.$engine.$round"
      rate=$(grep -o '[0-9]* target tokens/s' "$OUT/log.$who.$engine.$round" | cut -d' ' -f1)
      echo -e "$round\t$who\t$engine\t$rate" | tee -a "$OUT/speeds.tsv"
    done
  done
done
