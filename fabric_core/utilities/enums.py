"""``LightningEnum``: a string enum that compares to strings without regard to case."""

from __future__ import annotations

import warnings
from enum import Enum
from typing import Literal, TypeVar

__all__ = ["LightningEnum"]

_E = TypeVar("_E", bound="LightningEnum")
_Source = Literal["key", "value", "any"]


class LightningEnum(str, Enum):
    """A ``str`` enum whose members equal their value in any case: ``Mode.train == "TRAIN"``.

    Example::

        class Stage(LightningEnum):
            FIT = "fit"
            TEST = "test"

        Stage.from_str("Fit") is Stage.FIT
        Stage.FIT == "FIT"
    """

    @classmethod
    def from_str(cls: type[_E], value: str, source: _Source = "key") -> _E:
        """The member whose name (``source="key"``), value (``"value"``) or either (``"any"``, names first)
        matches ``value``; names match without regard to case, values exactly.

        Raises:
            ValueError: Nothing matches; the message lists what would.
        """
        if source in ("key", "any"):
            for name in cls.__members__:
                if name.lower() == value.lower():
                    return cls[name]
        if source in ("value", "any"):
            for name, member in cls.__members__.items():
                if member == value:
                    return cls[name]
        raise ValueError(f"Invalid match: expected one of {cls._allowed_matches(source)}, but got {value}.")

    @classmethod
    def try_from_str(cls: type[_E], value: str, source: _Source = "key") -> _E | None:
        """Like :meth:`from_str`, but warn and return ``None`` when nothing matches."""
        try:
            return cls.from_str(value, source)
        except ValueError:
            warnings.warn(
                f"Invalid string: expected one of {cls._allowed_matches(source)}, but got {value}.",
                UserWarning,
                stacklevel=2,
            )
            return None

    @classmethod
    def _allowed_matches(cls, source: str) -> list[str]:
        names = list(cls.__members__)
        values = [str(member.value) for member in cls.__members__.values()]
        return names if source == "key" else values if source == "value" else names + values

    def __eq__(self, other: object) -> bool:
        other_value = other.value if isinstance(other, Enum) else other
        return str(self.value).lower() == str(other_value).lower()

    def __hash__(self) -> int:
        # Equal members and strings must hash alike for sets and dict keys.
        return hash(str(self.value).lower())
