"""pyproject.toml declares what the code imports, with bounds where the code relies on them."""

import ast
import importlib.metadata
import re
import sys
import tomllib

from tests.support.paths import REPO

PACKAGES = ("translator", "training", "serving")
# Keras' other backends come from extras: the modules that run only on one (loaded on
# request, never by the TensorFlow path) import it at their top.
BACKENDS = {"jax"}


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]


def _imports() -> dict[str, bool]:
    """Third-party top-level modules imported by the packages: name -> at module level."""
    found: dict[str, bool] = {}
    local = {*PACKAGES, "bench", "tests"}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text("utf-8"))
            top = {id(node) for node in tree.body}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    root = name.split(".")[0]
                    if root in local or root in sys.stdlib_module_names:
                        continue
                    found[root] = found.get(root, False) or id(node) in top
    return found


def test_every_imported_module_comes_from_a_declared_dependency():
    project = _project()
    runtime = {_name(r) for r in project["dependencies"]}
    extras = {_name(r) for group in project["optional-dependencies"].values() for r in group}
    distributions = importlib.metadata.packages_distributions()
    for module, at_top in sorted(_imports().items()):
        provided = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        assert provided, f"{module}: no installed distribution provides it"
        # Module-level imports run whenever the module loads: runtime dependencies only.
        declared = runtime if at_top and module not in BACKENDS else runtime | extras
        # A distribution that comes with a declared one (keras' and tensorflow's own
        # dependencies) does not count: what the code imports is declared itself.
        assert provided & declared, f"{module} (from {sorted(provided)}) is not declared"


def test_bounds_where_the_code_relies_on_them():
    project = _project()
    requirements = {_name(r): r for r in project["dependencies"]}
    assert "<" in requirements["keras"]  # private Keras methods are overridden
    assert {"numpy", "protobuf"} <= set(requirements)  # imported directly
    assert "tensorflow-serving-api" in requirements  # the export's warm-up requests
    assert "<" in project["requires-python"]  # where TensorFlow publishes wheels
    assert isinstance(project["license"], str)  # an SPDX expression
    dev = {_name(r): r for r in project["optional-dependencies"]["dev"]}
    assert re.fullmatch(r"ruff==\d+\.\d+\.\*", dev["ruff"])
    assert {"ctranslate2", "selenium"} <= set(dev)  # `pip install -e ".[dev]"` runs every test
