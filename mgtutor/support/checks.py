"""Argument checks the modules share, so every "must be a whole number" error reads the same.

It imports nothing heavy: `bench` and `cluster` check arguments in processes that never load TensorFlow.
"""

from __future__ import annotations

import numbers
from typing import Any


def is_whole(value: Any) -> bool:
    """An integer, Python's or NumPy's, but not a bool (``True`` is an int to Python)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A real number (int, float, NumPy's), but not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_whole(name: str, value: Any, minimum: int, hint: str = "") -> int:
    """`value` as an int when it is a whole number >= `minimum`; else a ValueError naming `name`."""
    if not is_whole(value) or value < minimum:
        message = f"{name} must be a whole number >= {minimum}, got {value!r}."
        raise ValueError(f"{message} {hint}" if hint else message)
    return int(value)


def check_seed(seed: Any, name: str = "seed") -> int | None:
    """`seed` as an int, or None (no seed); else a ValueError naming `name` with an example."""
    if seed is None:
        return None
    if not is_whole(seed) or seed < 0:
        raise ValueError(f"{name} must be None or a whole number >= 0, got {seed!r}; pass e.g. {name}=0.")
    return int(seed)


def renamed(
    options: dict[str, Any], old: str, new: str, value: Any, default: Any, *, stacklevel: int = 3
) -> Any:
    """`value` of keyword `new`, or of `old` popped from `options` (its name before), with a warning.

    Both given is refused: the call would say two things. The warning comes once per calling line
    (Python's default filter), so a lesson or script that used the old name keeps running.
    """
    if old not in options:
        return value
    if value != default:
        raise TypeError(f"{old} and {new} are one option ({old} is its old name): pass {new}=... only.")
    import warnings

    warning = f"{old} is now called {new}; {old}=... still works, for now."
    warnings.warn(warning, FutureWarning, stacklevel=stacklevel)
    return options.pop(old)
