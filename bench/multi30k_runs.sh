# Shared by the shell benchmarks on Multi30k halves (source it; DATA, OUT, T and PY set).
#
#   halves                     OUT/train.{en,de}, OUT/half1.*, OUT/half2.* (first, second half)
#   vocab SYMBOLS              OUT/vocab: joint, 8,000 pieces, SYMBOLS kept one piece each
#   config NAME VS VT TAG ITEM...   OUT/NAME.yaml: the corpora ITEM..., validation VS -> VT
#   train NAME MINUTES [opt...]     trains OUT/NAME (skipped when done), log OUT/NAME.log
#   bleu NAME SRC REF [opt...]      test_2016_flickr BLEU (beam 4) of OUT/NAME, SRC -> REF

halves() {
  zcat "$DATA/train.en.gz" > "$OUT/train.en"; zcat "$DATA/train.de.gz" > "$OUT/train.de"
  local half=$(($(wc -l < "$OUT/train.en") / 2))
  for side in en de; do
    head -n "$half" "$OUT/train.$side" > "$OUT/half1.$side"
    tail -n "+$((half + 1))" "$OUT/train.$side" > "$OUT/half2.$side"
  done
}
vocab() {
  [ -f "$OUT/vocab/vocab.json" ] || $T build-vocab --src "$OUT/train.en" --tgt "$OUT/train.de" \
    --vocab-size 8000 --out "$OUT/vocab" --user-symbols "$1"
}
config() {
  local name=$1 vs=$2 vt=$3 tag=$4; shift 4
  {
    echo "data:"
    echo "  train:"
    for item in "$@"; do echo "    - $item"; done
    echo "  valid_source: $vs"
    echo "  valid_target: $vt"
    echo "  valid_tag: \"$tag\""
    echo "  vocabulary: $OUT/vocab"
    echo "  pipeline: {max_source_length: 128, max_target_length: 128}"
    echo "eval: {bleu: true}"
  } > "$OUT/$name.yaml"
}
train() {
  local name=$1 minutes=$2; shift 2
  [ -f "$OUT/$name/model/model.keras" ] || $T train --run-dir "$OUT/$name" \
    --config "$OUT/$name.yaml" --max-minutes "$minutes" "$@" > "$OUT/$name.log" 2>&1
}
bleu() {
  local name=$1 src=$2 ref=$3; shift 3
  local report="$OUT/eval-$name-$(basename "$ref")"
  $T evaluate --model "$OUT/$name" --src "$DATA/test_2016_flickr.$src.gz" \
    --ref "$DATA/test_2016_flickr.$ref.gz" --report "$report" "$@" > /dev/null 2>&1
  $PY -c "import json,sys; print(f\"{json.load(open(sys.argv[1]))['scores']['bleu']['score']:.2f}\")" \
    "$report/report.json"
}
