"""The checks of single config values: each returns the value, normalised, or raises ``Invalid`` with the
'expected ...' text that validation prefixes with the key path."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

from .roles import ROLES
from .yaml_io import UnresolvedPyObject, is_pyobject, pyobject_path


class Invalid(Exception):
    """Raised by a field check with 'expected ...' text; the caller adds the key path
    and, unless ``names_value`` (the text already says what was got), the value."""

    def __init__(self, message: str, names_value: bool = False):
        super().__init__(message)
        self.names_value = names_value


def _describe(value: Any) -> str:
    if isinstance(value, UnresolvedPyObject):
        return f"!pyobject {value.path} (cannot import: {value.reason})"
    if is_pyobject(value):
        return f"!pyobject {pyobject_path(value)}"
    return repr(value) if not isinstance(value, (dict, list)) else f"{type(value).__name__} {value!r}"


@dataclass
class Field:
    """One config key: its default and a check that returns the normalised value."""

    check: Callable[[Any], Any]
    default: Any = None
    nullable: bool = False
    doc: str = ""

    def validate(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        return self.check(value)


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        bounds = _bounds_text(minimum, maximum)
        if (isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum)
                or (maximum is not None and value > maximum)):
            raise Invalid(f"expected an integer{bounds}")
        return value

    return check


def integer_or_auto(minimum: int) -> Callable[[Any], int | str]:
    """An integer >= ``minimum``, or ``auto`` (resolved where it is used, from the machine it runs on)."""
    as_integer = integer(minimum)

    def check(value: Any) -> int | str:
        if value == "auto":
            return value
        try:
            return as_integer(value)
        except Invalid:
            raise Invalid(f"expected an integer >= {minimum} or auto") from None

    return check


def number(minimum: float | None = None, maximum: float | None = None, *, exclusive_min: bool = False):
    def check(value: Any) -> float:
        lo = f" > {minimum}" if exclusive_min else (f" >= {minimum}" if minimum is not None else "")
        hi = f" <= {maximum}" if maximum is not None else ""
        text = f"expected a number{lo}{' and' if lo and hi else ''}{hi}"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise Invalid(text)
        if minimum is not None and (value <= minimum if exclusive_min else value < minimum):
            raise Invalid(text)
        if maximum is not None and value > maximum:
            raise Invalid(text)
        return float(value)

    return check


def _bounds_text(minimum: Any, maximum: Any) -> str:
    if minimum is not None and maximum is not None:
        return f" between {minimum} and {maximum}"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid("expected true or false")
    return value


def string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise Invalid("expected a non-empty string")
    return value


def choice(*options: Any) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        # YAML reads a bare `off` as False; accept it where 'off' is an option.
        if value is False and "off" in options:
            return "off"
        # Type and value: YAML's 1 and 0 are not true and false, nor 2.0 the dimension 2.
        if not any(value == option and type(value) is type(option) for option in options):
            raise Invalid(f"expected one of {', '.join(repr(o) for o in options)}")
        return value

    return check


def pyobject(value: Any) -> Any:
    if isinstance(value, UnresolvedPyObject):
        raise Invalid(f"expected an importable Python object (!pyobject package.module.name); "
                       f"'{value.path}' does not import: {value.reason}", names_value=True)
    if not (isinstance(value, type) or inspect.isroutine(value)):
        # An instance (e.g. a loss object made in a module) cannot be written to the run's config.yaml.
        raise Invalid("expected a Python class or function given as !pyobject package.module.name "
                       "(not an instance: name the class, and put its arguments in the config)")
    return value


def pyobject_of(role: str) -> Callable[[Any], Any]:
    """A ``!pyobject`` value of the role ``role`` (``roles.ROLES``): anything else is refused here, in
    validation, before anything the config names is called."""
    def check(value: Any) -> Any:
        value = pyobject(value)
        if not ROLES[role].admits(value):
            raise Invalid(f"expected {ROLES[role].expected}, got {_describe(value)}{ROLES[role].explain(value)}",
                           names_value=True)
        return value

    return check


def callback_entry(value: Any) -> dict[str, Any]:
    """One item of ``callbacks:``: ``{type: !pyobject module.Class, kwargs: {...}}``, a QuantumGrav.Callback."""
    shape = "expected {type: !pyobject module.CallbackClass, kwargs: {...}}"
    if not isinstance(value, dict) or "type" not in value or set(value) - {"type", "kwargs"}:
        raise Invalid(shape)
    cls = pyobject(value["type"])
    if not ROLES["callback"].admits(cls):
        raise Invalid(f"{shape} whose type is {ROLES['callback'].expected}, got {_describe(cls)}", names_value=True)
    return {"type": cls, "kwargs": mapping(value.get("kwargs") or {})}


def list_of(item: Callable[[Any], Any], *, min_len: int = 0, length: int | None = None):
    def check(value: Any) -> list:
        what = f"a list of {length}" if length else "a list"
        if not isinstance(value, (list, tuple)) or len(value) < min_len or (length and len(value) != length):
            raise Invalid(f"expected {what}{f' with at least {min_len} item(s)' if min_len else ''}")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v))
            except Invalid as err:
                got = "" if err.names_value else f", got {_describe(v)}"
                raise Invalid(f"item {i}: {err}{got}", names_value=True) from None
        return out

    return check


def mapping(value: Any) -> dict:
    if not isinstance(value, dict):
        raise Invalid("expected a mapping (key: value pairs)")
    return dict(value)


def port(value: Any) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)  # the seeds write master_port: "12355"
    return integer(1, 65535)(value)


def fraction_or_range(value: Any) -> float | list[float]:
    """A number in (0, 1], or a range [low, high] of them with low <= high."""
    fraction = number(0.0, 1.0, exclusive_min=True)
    if not isinstance(value, (list, tuple)):
        return fraction(value)
    low, high = list_of(fraction, length=2)(value)
    if low > high:
        raise Invalid(f"expected a range [low, high] with low <= high, got {list(value)}")
    return [low, high]




def plain_name(value: Any) -> str:
    if not isinstance(value, str) or not value or "/" in value or "\\" in value or value in (".", ".."):
        raise Invalid("expected a plain folder name (no '/', not '.' or '..')")
    return value

