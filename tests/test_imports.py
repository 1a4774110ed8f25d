"""The import contract, checked over the source (no imports run).

- `translator` (the library) never imports `training`, `serving` or `bench`, not even
  inside a function; `training` and `serving` never import `bench`, nor each other.
- The command-line modules (`translator.cli`, `translator.commands.*`) are leaves: no
  library module, and nothing in `training`, `serving` or `bench`, imports them; a
  command imports no other command, only the shared `translator.commands.options`.
- No cycles among the modules of `translator`, `training` and `serving`, counting the
  imports inside functions too: an import deferred to keep TensorFlow off a fast path
  (`--help`) is still a dependency, and may not point back. Only `TYPE_CHECKING` blocks
  are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("translator", "training", "serving", "bench")
FORBIDDEN = {
    "translator": {"training", "serving", "bench"},
    "training": {"serving", "bench"},
    "serving": {"training", "bench"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
}


def imported(node: ast.AST) -> list[str]:
    """The modules an import statement names (`from a.b import c` -> a.b.c if a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        names = [f"{node.module}.{alias.name}" for alias in node.names]
        return [name if name in MODULES else node.module for name in names]
    return []


def is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test)


def all_imports(tree: ast.Module) -> set[str]:
    """Every import of a module, inside functions too, but not under `TYPE_CHECKING`."""
    found, pending = set(), list(tree.body)
    while pending:
        node = pending.pop()
        if is_type_checking(node):
            continue
        found.update(imported(node))
        pending.extend(ast.iter_child_nodes(node))
    return found


def test_every_package_is_found():
    for package in PACKAGES:
        assert package in MODULES, package
    assert len(MODULES) > 40


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_direction_of_imports(package):
    wrong = []
    for name, path in MODULES.items():
        if name.split(".")[0] != package:
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            for target in imported(node):
                if target.split(".")[0] in FORBIDDEN[package]:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert not wrong, "\n".join(wrong)


CLI_MODULES = ("translator.cli", "translator.commands")
SHARED_COMMAND_MODULES = {"translator.commands", "translator.commands.options"}


def is_cli(name: str) -> bool:
    return any(name == cli or name.startswith(cli + ".") for cli in CLI_MODULES)


def test_nothing_but_a_command_imports_the_command_line_modules():
    wrong = []
    for name, path in MODULES.items():
        if name == "translator.__main__":
            continue  # `python -m translator` runs the command line
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            for target in imported(node):
                if not is_cli(target) or target == name:
                    continue
                if is_cli(name) and (target in SHARED_COMMAND_MODULES or name == "translator.cli"):
                    continue  # a command uses the shared options; the CLI finds commands
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    graph = {
        name: {
            target
            for target in all_imports(ast.parse(path.read_text("utf-8")))
            if target in MODULES and target != name and not name.startswith("bench")
        }
        for name, path in MODULES.items()
    }
    cycles, state = [], {}

    def visit(name: str, stack: list[str]) -> None:
        state[name] = "open"
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target not in state:
                visit(target, [*stack, target])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
