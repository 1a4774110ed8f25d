"""Every benchmark's section: its words in bench/templates/<name>.md, its figures from the run.

What each template must satisfy, for all of them alike; the modules' own tests check the
sections they render.
"""

import ast
import importlib
from pathlib import Path

import pytest

from bench import harness

REPO = Path(__file__).resolve().parents[2]
NAMES = ("backends", "decoding", "engines", "jax_loop", "peers", "pipeline", "quality")
NAMES += ("serving",)
MODULES = {name: importlib.import_module(f"bench.{name}") for name in (*NAMES, "training")}
MODULES["accelerator"] = importlib.import_module("bench.accelerator.__main__")


def rendered_parts(module) -> set[str]:
    """The part names the module's source passes to `render` as literals (or either branch
    of a conditional expression); a name held in a variable is not seen here."""
    names = set()
    for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "render":
            first = node.args[0]
            choices = [first.body, first.orelse] if isinstance(first, ast.IfExp) else [first]
            names.update(c.value for c in choices if isinstance(c, ast.Constant))
    return names


@pytest.mark.parametrize("name", MODULES)
def test_the_template_is_found_beside_the_module_from_any_directory(name, tmp_path, monkeypatch):
    module = MODULES[name]
    assert REPO / "bench" / "templates" / f"{name}.md" == module.render.path
    monkeypatch.chdir(tmp_path)  # not the repository: the path does not depend on it
    assert harness.Template(name).parts["section"].startswith("## ")


@pytest.mark.parametrize("name", MODULES)
def test_every_part_of_the_template_is_used_and_every_part_used_exists(name):
    module = MODULES[name]
    parts = module.render.parts
    assert all(text and not text.endswith("\n") for text in parts.values())
    asked = rendered_parts(module)
    assert asked <= set(parts), asked - set(parts)  # nothing asked for is missing
    source = Path(module.__file__).read_text()
    unused = {part for part in parts if f'"{part}"' not in source}
    assert not unused, unused  # every part is named by the module


@pytest.mark.parametrize("name", MODULES)
def test_no_section_is_left_in_python_strings(name):
    source = Path(MODULES[name].__file__).read_text()
    assert '"""\n## ' not in source and '"""## ' not in source and '"## ' not in source
