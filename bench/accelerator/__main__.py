"""`python -m bench.accelerator prepare | run | publish` (see the package's docstring)."""

import argparse
import json
import os
import sys
from pathlib import Path

from bench import harness
from bench.accelerator import BATCH_TOKENS, BUNDLE, RESULTS_FILE

render = harness.Template("accelerator")


def parse(argv: list[str] | None) -> argparse.Namespace:
    doc, raw = sys.modules["bench.accelerator"].__doc__, argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        "python -m bench.accelerator", description=doc, formatter_class=raw
    )
    commands = parser.add_subparsers(dest="command", required=True)
    prepare = commands.add_parser("prepare", help="here, with TensorFlow: write the bundle")
    prepare.add_argument("--bundle", type=Path, default=BUNDLE, help="default: .accelerator/")
    prepare.add_argument("--data", help="Multi30k directory (default: the mirror)")
    prepare.add_argument("--batch-tokens", type=int, nargs="+", default=list(BATCH_TOKENS))
    prepare.add_argument("--no-wheels", action="store_true", help="skip the pip download")
    run = commands.add_parser("run", help="on the accelerator, no TensorFlow: the benchmark")
    run.add_argument("--bundle", type=Path, default=BUNDLE)
    run.add_argument("--out", type=Path, required=True, help="where accelerator.json goes")
    run.add_argument("--minutes", type=float, default=3.0, help="training time (default 3)")
    run.add_argument("--matmul-size", type=int, default=8192, help="n of the n^3 bf16 product")
    run.add_argument("--eval-limit", type=int, default=0, help="decode only the first N lines")
    speeds = commands.add_parser("speeds", help="on the accelerator: each shape's speed, MFU")
    speeds.add_argument("--bundle", type=Path, default=BUNDLE)
    speeds.add_argument("--out", type=Path, required=True, help="where speeds.json goes")
    speeds.add_argument("--batch-tokens", type=int, default=16384)
    speeds.add_argument("--seconds", type=float, default=5.0, help="of updates per shape")
    speeds.add_argument("--matmul-size", type=int, default=8192)
    publish = commands.add_parser("publish", help="here: write RESULTS.md's section")
    publish.add_argument("results", type=Path, help=f"the run's {RESULTS_FILE}")
    publish.add_argument("--results-md", type=Path, default=harness.RESULTS_PATH)
    return parser.parse_args(argv)


def section(result: dict, command: str) -> str:
    """The RESULTS.md section of one run's `accelerator.json`."""
    plan, scores, stages = result["plan"], result["scores"], result["stages"]
    figures = dict(
        tflops=result["matmul"]["flops_per_second"] / 1e12,
        minutes=result["training"]["seconds"] / 60,
        signature=scores["test"]["signature"],
        valid_bleu=scores["valid"]["bleu"],
        test_bleu=scores["test"]["bleu"],
        limited=f" (first {result['eval_limit']} lines)" if result["eval_limit"] else "",
        compile_seconds=stages["compile_timing"] + stages["compile"],
        measure_seconds=stages["measure"] + stages.get("measure_batch", 0.0),
        decode=stages["decode_valid"] + stages["decode_test"],
        budget=f"{plan['budget']['seconds'] / 60:.1f} minutes",
        plan="\n".join(f"- {line}" for line in result["plan_lines"]),
        bleu_verdict=harness.verdict(scores["test"]["bleu"], 40.0),
        mfu_verdict=harness.verdict(result["mfu"], 0.30),
        command=command,
        date=harness.today(),
    )
    return render("section", **{**result, **figures})


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.command == "prepare":
        from bench.accelerator import prepare  # TensorFlow: not in `run`

        data = harness.find_data(args.data, (*harness.TRAIN, *prepare.VALID, *prepare.TEST))
        prepare.prepare(args.bundle, data, tuple(args.batch_tokens), wheels=not args.no_wheels)
        print(f"device call: carry [{args.bundle.name!r}], command:\n{prepare.DEVICE_COMMAND}")
    elif args.command in ("run", "speeds"):
        os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras is imported
        from bench.accelerator import run

        if args.command == "run":
            run.run(args.bundle, args.out, args.minutes, args.matmul_size, args.eval_limit)
        else:
            run.shape_speeds(
                args.bundle, args.out, args.batch_tokens, args.seconds, args.matmul_size
            )
    else:
        result = json.loads(args.results.read_text())
        path = harness.update_section(
            "accelerator", section(result, result["command"]), args.results_md
        )
        print(f"wrote the accelerator section of {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
