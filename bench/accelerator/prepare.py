"""`prepare`: the recipe's work directory as far as training, made here where TensorFlow is
(the tf.data pipeline prepares the corpus once), and the wheels, into `.accelerator/`."""

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

from bench import accelerator as layout
from bench import harness
from training.config import DEFAULT_CONFIG, read_config
from training.recipe.corpus import prepare_data
from training.recipe.prepared import prepared_corpus
from training.recipe.settings import RecipePaths, RecipeSettings
from training.recipe.vocab import build_vocab

# The image's platform tags its pip accepts (the device tool's README), for its Python 3.12.
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT_BYTES = 64 * 2**20  # what a device call may carry
DEVICE_COMMAND = (
    "python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "
    ".accelerator/wheels/*.whl && PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 "
    "python3 -m bench.accelerator run --out $OUT"
)


def download_wheels(out: Path) -> list[str]:
    """The image's missing wheels, at this environment's versions, for its Python 3.12."""
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in layout.WHEELS]
    platforms = [arg for tag in WHEEL_PLATFORMS for arg in ("--platform", tag)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(out)]
    command += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    subprocess.run([*command, *platforms, *pins], check=True)
    # This project too: its `translator` command finds its subcommands by the entry points
    # of an installed distribution.
    project = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out)]
    subprocess.run([*project, str(layout.REPO)], check=True)
    return sorted(path.name for path in out.glob("*.whl"))


def prepare(bundle: Path, data: Path, wheels: bool = True) -> dict:
    """Writes the bundle; returns its manifest. SystemExit if it is over what a call carries."""
    shutil.rmtree(bundle, ignore_errors=True)
    bundle.mkdir(parents=True)
    paths = RecipePaths(bundle / layout.WORK)
    given = read_config(DEFAULT_CONFIG, layout.SETTINGS)  # the recipe's --set
    settings = RecipeSettings(3.0, str(data), None, config=given)
    corpus = prepare_data(paths, settings)  # Multi30k, copied from the mirror
    build_vocab(paths, settings, corpus)
    prepared = prepared_corpus(paths, settings, corpus, "jax")
    manifest = {
        "prepared": harness.today(),
        "data": str(data),
        "corpus": json.loads((prepared / "manifest.json").read_text()),
        "wheels": download_wheels(bundle / "wheels") if wheels else [],
    }
    (bundle / layout.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    size = sum(path.stat().st_size for path in bundle.rglob("*") if path.is_file())
    print(f"{bundle}: {size / 2**20:.1f} MiB (a device call carries {LIMIT_BYTES >> 20})")
    if size > LIMIT_BYTES:
        raise SystemExit(f"bench.accelerator: {bundle} is {size / 2**20:.1f} MiB, over 64 MiB")
    return manifest
