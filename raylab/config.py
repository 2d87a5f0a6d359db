"""Typed configs: frozen dataclasses built from YAML dicts with strict, named errors.

A workload's ``Config`` is a frozen dataclass with a docstring under each field. YAML keys are
the field names, one to one. ``from_dict`` refuses unknown keys and ill-typed values with a
message that names the file, the key and the valid keys; range checks live in the dataclass's
``__post_init__`` through ``check``. A field declared ``UserPath`` (a path the user gives) is
resolved here, once: a loop reads it as a ready absolute path, or a storage URI as given.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import math
import textwrap
import types
import typing
from typing import Any, Literal, Mapping, NewType, TypeVar, Union

from raylab.errors import UserError

T = TypeVar("T")

UserPath = NewType("UserPath", str)
"""A config field that holds a path the user gives: ``data_dir: UserPath = "~/data"``.

``from_dict`` resolves it once, as ``raylab.files.user_path`` does: ``~`` expanded, and a
relative path taken from where the command ran (``RAYLAB_LAUNCH_DIR`` inside a trial, else the
current folder), as an absolute path string. A storage URI (``s3://...``, ``raylab.files.is_uri``)
stays as given (one holding credentials is refused), and an empty string stays empty (unset).
A default is resolved like a given value. The value stays a ``str``: a Config still saves in a
checkpoint and in YAML as it did."""


def resolve_user_path(value: str, source: str, key: str) -> str:
    """A ``UserPath`` field's value resolved (see ``UserPath``); ``source``/``key`` name it in
    the refusal of a URI that holds credentials."""
    from raylab import files

    if not value:
        return value
    if files.is_uri(value):
        files.refuse_credentials(value, f"{source}: {key}")
        return value
    return str(files.user_path(value))


class ConfigValueError(ValueError):
    """An out-of-range or inconsistent value, raised by a Config's ``__post_init__``."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


VARIANT = "variant"
"""The config key of a search's ``variant`` group: fields set together (``search.variant.grid``)."""


def with_variant(config: dict[str, Any]) -> dict[str, Any]:
    """A trial's config with its ``variant`` group (if any) merged into the fields."""
    if VARIANT not in config:
        return config
    config = dict(config)
    group = config.pop(VARIANT)
    return {**config, **group}


def check(condition: bool, key: str, message: str) -> None:
    """Raise ``ConfigValueError(key, message)`` unless ``condition`` holds.

    Used in ``__post_init__``: ``check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")``.
    """
    if not condition:
        raise ConfigValueError(key, message)


def require_at_least(config: Any, minimum: float, *keys: str) -> None:
    """``check(value >= minimum, key, "must be >= minimum, got value")`` for each field."""
    for key in keys:
        value = getattr(config, key)
        check(value >= minimum, key, f"must be >= {minimum}, got {value}")


def require_positive(config: Any, *keys: str) -> None:
    """``check(value > 0, key, "must be > 0, got value")`` for each field."""
    for key in keys:
        value = getattr(config, key)
        check(value > 0, key, f"must be > 0, got {value}")


def from_dict(cls: type[T], data: Mapping[str, Any] | None, source: str, prefix: str = "") -> T:
    """Build the dataclass ``cls`` from ``data``, checking every key and type.

    ``source`` names where the values came from (a YAML path, or "command line"); ``prefix``
    is the dotted path of ``data`` inside that source (``config``, ``resources``...).
    Raises ``UserError`` with one line naming source, key and the valid keys.
    """
    data = {} if data is None else data
    where = f"{prefix}." if prefix else ""
    if not isinstance(data, Mapping):
        raise UserError(f"{source}: {prefix or 'top level'}: expected a mapping, got {data!r}")
    hints = type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise UserError(f"{source}: unknown key '{where}{key}'; valid keys: {', '.join(sorted(fields))}")
        kwargs[key] = coerce(value, hints[key], source, f"{where}{key}")
    for key, field in fields.items():  # a UserPath default is resolved like a given value
        if key not in kwargs and field.default is not dataclasses.MISSING and _holds_user_path(hints[key]):
            kwargs[key] = coerce(field.default, hints[key], source, f"{where}{key}")
    try:
        return cls(**kwargs)
    except ConfigValueError as err:
        raise UserError(f"{source}: {where}{err.key}: {err.message}") from None
    except (TypeError, ValueError) as err:
        raise UserError(f"{source}: {prefix or cls.__name__}: {err}") from None


def coerce(value: Any, annotation: Any, source: str, key: str) -> Any:
    """Check ``value`` against a type annotation; return it in the annotated form.

    Allowed conversions: int to float, list to tuple. Everything else must match exactly
    (``True`` is not an int, ``"3"`` is not a number).
    """
    annotation = {list: list[Any], tuple: tuple[Any, ...], dict: dict[str, Any]}.get(annotation, annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)

    def fail() -> typing.NoReturn:
        raise UserError(f"{source}: {key}: expected {type_name(annotation)}, got {value!r} ({type(value).__name__})")

    if annotation is Any:
        return value
    if annotation is UserPath:
        if not isinstance(value, str):
            fail()
        return resolve_user_path(value, source, key)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            if arg is UserPath and isinstance(value, str):  # a path: its own refusal, not "expected"
                return resolve_user_path(value, source, key)
            try:
                return coerce(value, arg, source, key)
            except UserError:
                pass
        fail()
    if origin is Literal:
        if value in args and type(value) in {type(a) for a in args}:
            return value
        raise UserError(f"{source}: {key}: {value!r} is not one of {', '.join(map(repr, args))}")
    if dataclasses.is_dataclass(annotation):
        return from_dict(annotation, value, source, key)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            fail()
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            items = [coerce(v, args[0], source, f"{key}[{i}]") for i, v in enumerate(value)]
        elif origin is tuple and args:
            if len(value) != len(args):
                raise UserError(f"{source}: {key}: expected {len(args)} items, got {len(value)}")
            items = [coerce(v, a, source, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args))]
        else:
            item_type = args[0] if args else Any
            items = [coerce(v, item_type, source, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            fail()
        key_type, value_type = args if args else (Any, Any)
        return {
            coerce(k, key_type, source, f"{key}"): coerce(v, value_type, source, f"{key}.{k}") for k, v in value.items()
        }
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail()
        if not math.isfinite(value):  # .inf or .nan would run to NaN metrics and exit 0
            raise UserError(f"{source}: {key}: expected a finite number, got {value!r}")
        return float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail()
        return value
    if annotation in (str, bool):
        if not isinstance(value, annotation):
            fail()
        return value
    raise TypeError(f"unsupported config annotation {annotation!r} for {key}")


def type_name(annotation: Any) -> str:
    """A short human name for a type annotation (``float``, ``'mse' | 'huber'``, ...)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join("null" if a is type(None) else type_name(a) for a in args)
    if origin in (tuple, list):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if annotation is UserPath:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def _holds_user_path(annotation: Any) -> bool:
    """Whether a field's annotation is ``UserPath`` or holds it (``UserPath | None``, a tuple)."""
    return annotation is UserPath or any(_holds_user_path(arg) for arg in typing.get_args(annotation))


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints`` for a dataclass, cached (configs use postponed annotations)."""
    return typing.get_type_hints(cls)


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each field of a dataclass, by field name.

    Reads the class source: a string literal statement right after an annotated assignment is
    that field's docstring (the convention of Sphinx and torchtune).
    """
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for stmt, nxt in zip(body, body[1:]):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def to_dict(config: Any) -> dict[str, Any]:
    """A dataclass as plain YAML-friendly values (tuples become lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {k: plain(v) for k, v in dataclasses.asdict(config).items()}
