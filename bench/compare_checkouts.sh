#!/usr/bin/env bash
# Decoding and training speed of two checkouts, interleaved round by round on one model and
# corpus, and whether both translate byte for byte alike (e.g. a refactor against its base).
#
#   bash bench/compare_checkouts.sh OLD_TREE NEW_TREE RUN_DIR OUT_DIR [ROUNDS]
#
# RUN_DIR is a finished training run (its config.yaml and data are reused; validation BLEU
# is off); each round translates test_2016_flickr beside its data with beam 4 (each tree
# tracing its own search: no search cache, which both trees would share) and trains one
# minute from scratch, old then new. Nothing else should run on the machine meanwhile.
# TRANSLATE_ARGS adds options to both trees' `translate` (e.g. --no-split); OLD_EXTRA adds to
# the old tree's PYTHONPATH (e.g. a copy of the installed dist-info with the old tree's
# entry points, where a command module moved since).
set -u
mkdir -p "$4"
OLD=$(realpath "$1") NEW=$(realpath "$2") RUN=$(realpath "$3") OUT=$(realpath "$4") ROUNDS=${5:-3}
PY=${PYTHON:-python}
# `python -m` puts the working directory first on sys.path, before PYTHONPATH: run from a
# directory that is neither tree, or both "trees" would be the one the command started in.
cd "$OUT"
path_of() { if [ "$1" = "$OLD" ]; then echo "$OLD${OLD_EXTRA:+:$OLD_EXTRA}"; else echo "$1"; fi; }
for tree in "$OLD" "$NEW"; do
  got=$(PYTHONPATH=$(path_of "$tree") $PY -c "import translator, os; print(os.path.dirname(os.path.dirname(translator.__file__)))" 2>/dev/null)
  [ "$got" = "$tree" ] || { echo "PYTHONPATH=$tree imports translator from $got" >&2; exit 1; }
done
DATA=$(dirname "$($PY -c "import yaml,sys; print(yaml.safe_load(open('$RUN/config.yaml'))['data']['train_source'])")")
export TF_CPP_MIN_LOG_LEVEL=2
for round in $(seq "$ROUNDS"); do
  for tag in old new; do
    tree=$NEW; [ $tag = old ] && tree=$OLD
    PYTHONPATH=$(path_of "$tree") $PY -m translator translate --model "$RUN" -i "$DATA/test_2016_flickr.en.gz" \
      -o "$OUT/hyp.$tag.$round" --beam-size 4 --no-search-cache ${TRANSLATE_ARGS:-} \
      2> "$OUT/decode.$tag.$round.log"
    echo "decode $tag $round: $(tail -1 "$OUT/decode.$tag.$round.log")"
  done
done
for round in $(seq "$ROUNDS"); do
  for tag in old new; do
    tree=$NEW; [ $tag = old ] && tree=$OLD
    rm -rf "$OUT/train.$tag.$round"
    PYTHONPATH=$(path_of "$tree") $PY -m translator train --run-dir "$OUT/train.$tag.$round" \
      --config "$RUN/config.yaml" --set train.max_minutes=1.0 --set eval.every_steps=0 \
      --set eval.bleu=false > "$OUT/train.$tag.$round.log" 2>&1
    $PY -c "import json,sys; m=json.load(open(sys.argv[1])); print(f'train $tag $round: {m[\"target_tokens\"]/m[\"training_seconds\"]:.0f} target tok/s ({m[\"step\"]} steps)')" \
      "$OUT/train.$tag.$round/model/metadata.json"
  done
done
for round in $(seq "$ROUNDS"); do
  cmp -s "$OUT/hyp.old.$round" "$OUT/hyp.new.$round" && echo "round $round: same translations" \
    || echo "round $round: translations DIFFER"
done
