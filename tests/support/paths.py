"""Where things are: the checkout under test and the scripts the tests run as processes."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Run as subprocesses (`python SCRIPTS / name ...`), never imported.
SCRIPTS = Path(__file__).resolve().parent / "scripts"
