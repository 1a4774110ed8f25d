"""`python -m bench.accelerator prepare | run | speeds | publish` (see the package's docstring)."""

import argparse
import json
import os
import sys
from pathlib import Path

from bench import harness
from bench.accelerator import BUNDLE, RESULTS_FILE

render = harness.Template("accelerator")
SECTION = "accelerator-recipe"  # the product's runs ("accelerator": the old loop's, kept)


def parse(argv: list[str] | None) -> argparse.Namespace:
    doc, raw = sys.modules["bench.accelerator"].__doc__, argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        "python -m bench.accelerator", description=doc, formatter_class=raw
    )
    commands = parser.add_subparsers(dest="command", required=True)
    prepare = commands.add_parser("prepare", help="here, with TensorFlow: write the bundle")
    prepare.add_argument("--bundle", type=Path, default=BUNDLE, help="default: .accelerator/")
    prepare.add_argument("--data", help="Multi30k directory (default: the mirror)")
    prepare.add_argument("--no-wheels", action="store_true", help="skip the pip download")
    run = commands.add_parser("run", help="on the accelerator, no TensorFlow: the recipe")
    run.add_argument("--bundle", type=Path, default=BUNDLE)
    run.add_argument("--out", type=Path, required=True, help="where accelerator.json goes")
    run.add_argument("--minutes", type=float, default=3.0, help="the recipe's (default 3)")
    run.add_argument("--test-sentences", type=int, default=0, help="report on the first N only")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed on to the recipe (repeatable): a trial of a batch or learning rate "
        "the plan does not choose, for instance beyond the batches its rule was fit on",
    )
    speeds = commands.add_parser("speeds", help="on the accelerator: each shape's speed, MFU")
    speeds.add_argument("--bundle", type=Path, default=BUNDLE)
    speeds.add_argument("--out", type=Path, required=True, help="where speeds.json goes")
    speeds.add_argument("--batch-tokens", type=int, default=16384, help="without --plan")
    speeds.add_argument(
        "--plan", type=Path, help="a run's plan.json: the shapes it timed, at its batches"
    )
    speeds.add_argument("--seconds", type=float, default=5.0, help="of updates per shape")
    speeds.add_argument("--matmul-size", type=int, default=8192)
    publish = commands.add_parser("publish", help="here: write RESULTS.md's section")
    publish.add_argument("results", type=Path, help=f"the run's {RESULTS_FILE}")
    publish.add_argument("--speeds", type=Path, help="the same device's speeds.json")
    publish.add_argument("--results-md", type=Path, default=harness.RESULTS_PATH)
    return parser.parse_args(argv)


def section(result: dict, speeds: dict | None) -> str:
    """The RESULTS.md section of one run's `accelerator.json` (and `speeds.json`)."""
    measured = (speeds or {}).get("shapes", {})
    rows = []
    for name, planned in result["plan"]["speeds"].items():
        how = "timed" if planned["measured"] else "estimated"
        row = measured.get(name, {})
        timed = row.get("tokens_per_second")
        batch = row.get("batch_tokens", (speeds or {}).get("batch_tokens"))
        rows.append(
            f"| {name} | {planned['tokens_per_second']:,.0f} ({how}, at "
            f"{planned['batch_tokens']:,}) | "
            + (f"{timed:,.0f} (at {batch:,})" if timed else "not measured")
            + " |"
        )
    figures = dict(
        minutes=result["budget_seconds"] / 60,
        batch_tokens=_choice(result["plan"], "data.pipeline.batch_tokens"),
        plan="\n".join(f"- {line}" for line in result["plan_lines"]),
        speed_rows="\n".join(rows),
        valid_bleu=result["best_validation_bleu"] or 0.0,
        compile_seconds=result["compile_seconds"] or 0.0,
        bleu_verdict=harness.verdict(result["test_bleu"], 40.5),
        date=harness.today(),
    )
    return render("section", **{**result, **figures})


def _choice(plan: dict, key: str) -> object:
    """A planned value of plan.json's choices (a list of {key, value, ...})."""
    return next(choice["value"] for choice in plan["choices"] if choice["key"] == key)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.command == "prepare":
        from bench.accelerator import prepare  # TensorFlow: not in `run`

        data = harness.find_data(args.data, (*harness.TRAIN, harness.TEST_SOURCE))
        prepare.prepare(args.bundle, data, wheels=not args.no_wheels)
        print(f"device call: carry [{args.bundle.name!r}], command:\n{prepare.DEVICE_COMMAND}")
    elif args.command in ("run", "speeds"):
        os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras is imported
        from bench.accelerator import run

        if args.command == "run":
            run.run(args.bundle, args.out, args.minutes, args.test_sentences, tuple(args.set))
        else:
            run.shape_speeds(
                args.bundle, args.out, args.batch_tokens, args.seconds, args.matmul_size,
                args.plan,
            )  # fmt: skip
    else:
        result = json.loads(args.results.read_text())
        speeds = json.loads(args.speeds.read_text()) if args.speeds else None
        path = harness.update_section(SECTION, section(result, speeds), args.results_md)
        print(f"wrote the {SECTION} section of {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
