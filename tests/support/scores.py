"""The `sacrebleu` command-line program, run as a user would, for reference scores."""

import json
import os
import re
import subprocess
import sys

METRIC_KEYS = {"BLEU": "bleu", "chrF2": "chrf", "TER": "ter", "chrF2++": "chrf_pp"}


def _sacrebleu(*args):
    env = {k: v for k, v in os.environ.items() if k != "SACREBLEU_SEED"}  # the default seed
    result = subprocess.run(
        [sys.executable, "-m", "sacrebleu", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def sacrebleu_scores(
    ref, hyp, lowercase=False, langs=None, ter_asian=False, metrics=("bleu", "chrf", "ter")
):
    """{key: (score, signature)} from `sacrebleu REF... -i HYP -m METRICS -f json -w 4`.

    Args:
        ref: One reference file, or a list of them (multiple references).
        hyp: The hypotheses file.
        lowercase: -lc.
        langs: -l SRC-TGT (sacreBLEU chooses BLEU's tokenizer for TGT).
        ter_asian: --ter-asian-support.
        metrics: -m; "chrf++" is chrf with --chrf-word-order 2.
    """
    refs = list(ref) if isinstance(ref, list | tuple) else [ref]
    extra = ["-lc"] if lowercase else []
    extra += ["-l", langs] if langs else []
    extra += ["--ter-asian-support"] if ter_asian else []
    if "chrf++" in metrics:
        extra += ["--chrf-word-order", "2"]
    names = [m.replace("chrf++", "chrf") for m in metrics]
    out = _sacrebleu(*refs, "-i", hyp, "-m", *names, "-f", "json", "-w", "4", *extra)
    scores = json.loads(out)
    scores = scores if isinstance(scores, list) else [scores]
    return {METRIC_KEYS[m["name"]]: (m["score"], m["signature"]) for m in scores}


def sacrebleu_paired(ref, baseline, system):
    """sacreBLEU's paired bootstrap test (its JSON output is broken in 2.6: float32).

    Returns:
        {key: dict(baseline=(score, mean, ci), system=(score, mean, ci), p_value=p)} parsed
        from the text table, and the signatures {key: signature}.
    """
    out = _sacrebleu(
        ref,
        "-i",
        baseline,
        system,
        "-m",
        "bleu",
        "chrf",
        "ter",
        "--paired-bs",
        "-w",
        "4",
        "-nc",
        "-f",
        "text",
    )
    cells = [tuple(map(float, m)) for m in re.findall(r"(-?[\d.]+) \((-?[\d.]+) ± ([\d.]+)\)", out)]
    p_values = [float(p) for p in re.findall(r"\(p = ([\d.]+)\)", out)]
    assert len(cells) == 6 and len(p_values) == 3, out
    keys = ("bleu", "chrf", "ter")
    results = {
        key: {"baseline": cells[i], "system": cells[3 + i], "p_value": p_values[i]}
        for i, key in enumerate(keys)
    }
    signatures = {
        METRIC_KEYS[name]: signature
        for name, signature in re.findall(r"^ - (BLEU|chrF2|TER)\s+(\S+)$", out, re.MULTILINE)
    }
    return results, signatures
