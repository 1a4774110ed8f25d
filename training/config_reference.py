"""The run config's reference: every key with its type, default and meaning.

Read from the dataclasses themselves (`RunConfig` and its sections, `PipelineConfig`,
`TrainCorpus`, and `TransformerConfig` for `model.overrides`), each meaning from the
comment above its field, so the reference cannot drift from the code. `translator train
--help-config` prints it; docs/config.md is it, written by
`python -m training.config_reference > docs/config.md` (a test checks they agree).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Iterator

from training.config import DataSection, ModelSection, RunConfig, TrainCorpus
from translator.config import TransformerConfig

# Fields a user never sets in `model.overrides`: they come from the vocabulary.
FROM_THE_VOCABULARY = ("source_vocab_size", "target_vocab_size")
FIELD = re.compile(r"^\s*(\w+)\s*:")


@dataclasses.dataclass(frozen=True)
class Key:
    """One settable key of a run config."""

    # Dotted, as `--set` and the YAML nesting spell it.
    path: str
    # Its type, as annotated.
    type: str
    # Its default, as YAML would show it ("" when it has none).
    default: str
    # The comment above its field, on one line.
    meaning: str


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment, on one line.

    A field with none shares the one before it: consecutive fields documented together
    (Adam's beta_1, beta_2 and epsilon).
    """
    names = {field.name for field in dataclasses.fields(cls)}
    comments: dict[str, str] = {}
    pending: list[str] = []
    last = ""
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = FIELD.match(line)
        if match and match.group(1) in names:
            last = " ".join(pending) if pending else last
            comments[match.group(1)] = last
        elif stripped:
            last = ""
        pending = []
    return comments


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value or '""'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _type_name(annotation: object) -> str:
    """`int`, `int or None`, `one of a, b`, `tuple[int, ...]`, `mapping of str to int`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    if origin in (typing.Union, types.UnionType):
        return " or ".join("None" if a is type(None) else _type_name(a) for a in args)
    if origin is dict:  # a mapping of names to values
        return f"mapping of str to {_type_name(args[1])}"
    if not args:
        return getattr(annotation, "__name__", str(annotation))
    return re.sub(r"\b[\w.]+\.(\w+)", r"\1", str(annotation).replace("typing.", ""))


def keys(cls: type = RunConfig, prefix: str = "") -> Iterator[Key]:
    """The keys of `cls` (a config dataclass), sections expanded, in definition order."""
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    for field in dataclasses.fields(cls):
        path, hint = f"{prefix}{field.name}", hints[field.name]
        if dataclasses.is_dataclass(hint):
            yield from keys(hint, f"{path}.")
            continue
        yield Key(path, _type_name(hint), _default(field), comments.get(field.name, ""))
        if cls is DataSection and field.name == "train":
            yield from keys(TrainCorpus, f"{path}[].")
        if cls is ModelSection and field.name == "overrides":
            for key in keys(TransformerConfig, f"{path}."):
                if key.path.rsplit(".", 1)[-1] not in FROM_THE_VOCABULARY:
                    yield dataclasses.replace(key, default="(the preset's)")


def reference() -> str:
    """The reference as Markdown: one table per section of `RunConfig`."""
    lines = [
        "# Run config reference",
        "",
        "Every key of a `translator train` run config (YAML, or `--set KEY=VALUE`). Generated",
        "from the dataclasses by `python -m training.config_reference`; "
        "`translator train --help-config` prints it.",
    ]
    for section in dataclasses.fields(RunConfig):
        summary = inspect.getdoc(typing.get_type_hints(RunConfig)[section.name]) or ""
        lines += ["", f"## {section.name}", "", summary.splitlines()[0], ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for key in keys(typing.get_type_hints(RunConfig)[section.name], f"{section.name}."):
            meaning = key.meaning.replace("|", "\\|")
            lines.append(f"| `{key.path}` | {key.type} | `{key.default}` | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
