"""Options written once, as the fields of a dataclass; a function's signature derived from them.

`takes_options` gives a function written with ``**options`` the signature of the fields it takes
(what ``help()``, Jupyter's Shift-Tab and `inspect.signature` show), with the dataclass's defaults or
the function's own, and binds every call to that signature before the body runs: a misspelt or missing
option is refused before any work, and the body gets every option, defaults filled in. A new option
is then one field, not one more line in every signature that lists it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

REQUIRED = inspect.Parameter.empty  # as a default in `defaults`: the function makes the option required
_KEYWORD = inspect.Parameter.KEYWORD_ONLY


def option_defaults(options: type) -> dict[str, Any]:
    """Each field of the dataclass `options` and its default (`REQUIRED` for a field without one)."""
    found = {}
    for field in dataclasses.fields(options):
        if field.default is not dataclasses.MISSING:
            found[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            found[field.name] = field.default_factory()
        else:
            found[field.name] = REQUIRED
    return found


def takes_options(
    options: type,
    names: Iterable[str] | None = None,
    *,
    positional: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
    rest: str | None = None,
) -> Callable[[Callable], Callable]:
    """Decorate ``def f(<its own parameters>, **options)`` to take the fields `names` of `options`.

    The signature is f's own parameters, then `positional` (fields a caller may also pass by position,
    right after f's positional ones), then the other fields keyword-only, in the dataclass's order, then
    f's own keyword-only ones; `defaults` overrides a field's default for this function (`REQUIRED`: none).
    `rest` names a ``**rest`` that keeps any other keyword (handed to the body among the options);
    without it an unknown keyword is refused, as Python refuses it.
    """
    fields = {field.name: field for field in dataclasses.fields(options)}
    names = list(fields) if names is None else list(names)
    unknown = sorted(set(names) - set(fields)) or sorted(set(positional) - set(names))
    if unknown:
        raise ValueError(f"{options.__name__} has no field(s) {unknown} among those taken.")
    own_defaults = dict(defaults or {})
    positional, defaults = list(positional), {**option_defaults(options), **own_defaults}
    # A default_factory makes a fresh value for each call, as the dataclass would: never one shared list.
    factories = {
        name: fields[name].default_factory for name in names
        if name not in own_defaults and fields[name].default_factory is not dataclasses.MISSING
    }  # fmt: skip

    def parameter(name: str, kind: Any) -> inspect.Parameter:
        return inspect.Parameter(name, kind, default=defaults[name], annotation=fields[name].type)

    def decorate(function: Callable) -> Callable:
        own = [p for p in inspect.signature(function).parameters.values() if p.kind is not p.VAR_KEYWORD]
        leading = [p for p in own if p.kind is not _KEYWORD]
        keyword = [p for p in own if p.kind is _KEYWORD]
        parameters = [
            *leading,
            *(parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in positional),
            *(parameter(name, _KEYWORD) for name in names if name not in positional),
            *keyword,
            *([inspect.Parameter(rest, inspect.Parameter.VAR_KEYWORD)] if rest else []),
        ]
        signature = inspect.signature(function).replace(parameters=parameters)
        by_position = [p.name for p in leading]

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as err:  # in Python's words, with the function's name as Python gives it
                raise TypeError(f"{function.__qualname__}() {err}") from None
            fresh = {name: make() for name, make in factories.items() if name not in bound.arguments}
            bound.apply_defaults()
            given = {**bound.arguments, **fresh}
            extra = given.pop(rest, {}) if rest else {}
            leading_values = [given.pop(name) for name in by_position]
            return function(*leading_values, **given, **extra)

        wrapper.__signature__ = signature
        return wrapper

    return decorate
