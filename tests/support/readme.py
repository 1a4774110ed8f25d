"""The README's example commands, as the tests read them (`tests/test_readme*.py`)."""

from __future__ import annotations

from tests.support.paths import REPO

README = REPO / "README.md"
# Blocks run only on a GPU (the line that marks them).
GPU_BLOCK = '".[gpu]"'


def readme_commands(gpu: bool = False) -> list[str]:
    """The `translator` commands of the README's bash blocks, continuation lines joined.

    `gpu`: also those of the blocks run only on a GPU.
    """
    commands, block, in_bash = [], [], False
    for line in README.read_text("utf-8").splitlines():
        if line.startswith("```"):
            if in_bash and (gpu or not any(GPU_BLOCK in text for text in block)):
                commands += _joined(block)
            in_bash, block = line == "```bash", []
        elif in_bash:
            block.append(line)
    return [command for command in commands if "translator " in command]


def _joined(lines: list[str]) -> list[str]:
    joined, current = [], ""
    for line in lines:
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        joined.append(current)
        current = ""
    return joined
