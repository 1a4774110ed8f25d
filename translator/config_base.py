"""`DictConfig`: what every frozen config dataclass shares, a plain dict and back."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Self

from translator.errors import ConfigError


class DictConfig:
    """Base of the frozen config dataclasses (`TransformerConfig`, `PipelineConfig`, ...).

    `to_dict` gives a plain dict (tuples become lists); `from_dict` is its inverse and
    rejects unknown keys, so a typo is an error, not an ignored setting.
    """

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of every field."""
        fields = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> Self:
        """Inverse of `to_dict`.

        Raises:
            ConfigError: naming the unknown keys.
        """
        unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"Unknown {cls.__name__} field(s): {', '.join(unknown)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
