"""Option and argument values converted without a pydantic ``TypeAdapter`` per parameter.

Typer 0.29 converts each value through a pydantic ``TypeAdapter`` that it builds on first use:
importing pydantic and building the adapters was about 100 ms of every command's start-up
(docs/performance.md). The values prefctl's commands take are plain (text, whole numbers, numbers,
flags, paths, choices, and lists of these), so :func:`install` gives the parameters of the command
being run a converter that does exactly what Typer does with such values, and hands every other
value to Typer's own converter, an invalid value included, so that errors read the same.

Borrowed internals (CONTRIBUTING.md): the ``_runtime_param`` slot of ``typer.core._TyperParameter``
(Typer fills it on first use; a converter found there is used), the fields of its
``type_descriptor`` and the ``coerce(value, param=, ctx=)`` contract of what sits in the slot.
:func:`internals_problem` checks them; when it finds one, nothing is installed and Typer converts
every value itself: slower, the same values.
"""

from __future__ import annotations

import inspect
import os
import re
import stat
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# Typer releases whose internals this module was tested with: [low, high).
TESTED_TYPER = ((0, 29), (0, 30))  # 0.29 brought the pydantic converters

_PARAMETER_INFO_FIELDS = (
    "parser",
    "min",
    "max",
    "clamp",
    "exists",
    "file_okay",
    "dir_okay",
    "readable",
    "writable",
    "resolve_path",
    "allow_dash",
    "path_type",
    "case_sensitive",
)

_MISS: Any = object()  # "not sure": the value goes to Typer's own converter
_WHOLE = re.compile(r"-?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})

Convert = Callable[[Any, Any], Any]  # (value, ctx) → the converted value, or _MISS


def _version(text: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)", text)
    return None if match is None else (int(match[1]), int(match[2]))


def internals_problem() -> str | None:
    """Why Typer's internals are not as this module expects (None: they are)."""
    import typer
    import typer.core

    problem = _version_problem(typer)
    if problem is not None:
        return problem
    parameter = getattr(typer.core, "_TyperParameter", None)
    if parameter is None or "_runtime_param" not in getattr(parameter, "__annotations__", {}):
        return "typer.core._TyperParameter has no _runtime_param slot"
    if not callable(getattr(parameter, "get_runtime_param", None)):
        return "typer.core._TyperParameter has no get_runtime_param"
    build = getattr(typer.core, "build_runtime_param", None)
    if build is None or list(inspect.signature(build).parameters) != ["descriptor"]:
        return "typer.core.build_runtime_param is not build_runtime_param(descriptor)"
    coerce = getattr(getattr(typer.core, "RuntimeParam", None), "coerce", None)
    if coerce is None or list(inspect.signature(coerce).parameters) != [
        "self",
        "value",
        "param",
        "ctx",
    ]:
        return "typer.core.RuntimeParam.coerce is not coerce(value, param, ctx)"
    from typer.models import ParameterInfo

    info = ParameterInfo()
    missing = [name for name in _PARAMETER_INFO_FIELDS if not hasattr(info, name)]
    if missing:
        return f"typer's ParameterInfo has no {', '.join(missing)}"
    return help_internals_problem()  # the help option is reached as tidy_help reaches it


_problem: list[str | None] = []  # the check's answer, once per process


def help_internals_problem() -> str | None:
    """Why the Typer internals that tidy prefctl's help (``cli/app.py``: ``tidy_help``) are not as
    expected (None: they are), once per process: Typer within ``TESTED_TYPER``; a command's
    ``get_help_option(ctx)`` that reads only ``ctx.help_option_names`` (it is called with a
    ``SimpleNamespace`` before any context exists) and gives an option with ``metavar``,
    ``is_flag``, ``count`` and ``param_type_name``."""
    if _help_problem:
        return _help_problem[0]
    import typer
    import typer.core

    problem = _version_problem(typer)
    if problem is None:
        names = SimpleNamespace(help_option_names=["--help"])
        for probe in (typer.core.TyperCommand("probe"), typer.core.TyperGroup(name="probe")):
            kind = type(probe).__name__
            try:
                option = probe.get_help_option(names)  # type: ignore[arg-type]
            except Exception as exc:  # any change of the contract
                problem = f"{kind}.get_help_option(ctx) failed: {exc!r}"
                break
            fields = ("metavar", "is_flag", "count", "param_type_name")
            if option is None or not all(hasattr(option, name) for name in fields):
                problem = f"{kind}.get_help_option(ctx) gives no option with {', '.join(fields)}"
                break
    if problem is not None:
        import logging

        logging.getLogger(__name__).debug("help as Typer renders it: %s", problem)
    _help_problem.append(problem)
    return problem


_help_problem: list[str | None] = []  # help_internals_problem's answer, once per process


def color_switch_problem(rich_utils: Any) -> str | None:
    """Why ``rich_utils.COLOR_SYSTEM`` (Typer's switch for help without any styling) cannot be
    set (None: it can): Typer within ``TESTED_TYPER`` and the attribute there."""
    import typer

    problem = _version_problem(typer)
    if problem is None and not hasattr(rich_utils, "COLOR_SYSTEM"):
        problem = "typer.rich_utils has no COLOR_SYSTEM"
    return problem


def _version_problem(typer: Any) -> str | None:
    version = _version(getattr(typer, "__version__", ""))
    low, high = TESTED_TYPER
    if version is None or not low <= version < high:
        return f"typer {getattr(typer, '__version__', '?')} is not in the tested range"
    return None


def install(command: Any, help_option_names: list[str]) -> bool:
    """Give each parameter of ``command`` and of the commands below it whose values are plain a
    converter that spares pydantic (their ``help_option_names`` option too). False (and nothing
    done) when Typer's internals are not as expected."""
    if not _problem:
        _problem.append(internals_problem())
        if _problem[0] is not None:
            import logging

            logging.getLogger(__name__).debug(
                "option values go through Typer's own converter: %s", _problem[0]
            )
    if _problem[0] is not None:
        return False
    _install(command, SimpleNamespace(help_option_names=help_option_names))
    return True


def _install(command: Any, names: SimpleNamespace) -> None:
    help_option = command.get_help_option(names)  # made on first use, kept by the command
    for param in [*command.params, *([help_option] if help_option else [])]:
        descriptor = getattr(param, "type_descriptor", None)
        if descriptor is None or getattr(param, "_runtime_param", _MISS) is not None:
            continue
        convert = converter(descriptor)
        if convert is not None:
            param._runtime_param = PlainValues(convert, descriptor)
    for sub in getattr(command, "commands", {}).values():
        _install(sub, names)


class PlainValues:
    """What Typer keeps in a parameter's ``_runtime_param``: converts plain values itself and hands
    the others to the converter Typer would have built."""

    __slots__ = ("_convert", "_descriptor", "_typer")

    def __init__(self, convert: Convert, descriptor: Any) -> None:
        self._convert = convert
        self._descriptor = descriptor
        self._typer: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multiple = param.multiple or param.nargs == -1
        if value is None:
            return () if multiple else None
        if multiple:
            if not isinstance(value, list | tuple):
                return self._by_typer(value, param, ctx)
            items = [self._convert(item, ctx) for item in value]
            if any(item is _MISS for item in items):
                return self._by_typer(value, param, ctx)
            return items
        converted = self._convert(value, ctx)
        if converted is _MISS:
            return self._by_typer(value, param, ctx)
        return converted

    def _by_typer(self, value: Any, param: Any, ctx: Any) -> Any:
        if self._typer is None:
            import typer.core

            self._typer = typer.core.build_runtime_param(  # type: ignore[attr-defined]
                self._descriptor
            )
        return self._typer.coerce(value, param=param, ctx=ctx)


def converter(descriptor: Any) -> Convert | None:
    """The converter for a parameter of this ``type_descriptor``, or None when its values are not
    plain enough (Typer converts them all)."""
    if descriptor.file_annotation is not None:
        return None
    annotation = descriptor.annotation
    origin = getattr(annotation, "__origin__", None)
    if origin is list:
        args: tuple[Any, ...] = getattr(annotation, "__args__", ())
        return _leaf(args[0], descriptor.parameter_info) if len(args) == 1 else None
    if origin is not None:
        return None
    return _leaf(annotation, descriptor.parameter_info)


def _leaf(annotation: Any, info: Any) -> Convert | None:
    if info.parser is not None:
        return None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _choice(annotation, case_sensitive=info.case_sensitive)
    if annotation is str:
        return _text
    if annotation is bool:
        return _flag
    if annotation is int and not info.clamp:
        return _number(int, _WHOLE, info.min, info.max)
    if annotation is float and not info.clamp:
        return _number(float, _DECIMAL, info.min, info.max)
    if annotation is Path and not (
        info.exists or info.writable or info.resolve_path or info.allow_dash or info.path_type
    ):
        return _path(file_okay=info.file_okay, dir_okay=info.dir_okay, readable=info.readable)
    return None


def _text(value: Any, ctx: Any) -> Any:
    return value if type(value) is str else _MISS


def _flag(value: Any, ctx: Any) -> Any:
    if type(value) is bool:
        return value
    if type(value) is str:
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE or word == "":
            return False
    return _MISS


def _number(kind: type, pattern: re.Pattern[str], low: Any, high: Any) -> Convert:
    def convert(value: Any, ctx: Any) -> Any:
        if type(value) is kind:
            number = value
        elif type(value) is str and pattern.fullmatch(value):
            number = kind(value)
        else:
            return _MISS
        if (low is not None and number < low) or (high is not None and number > high):
            return _MISS  # Typer says what the bound is
        return number

    return convert


def _choice(enum: type[Enum], *, case_sensitive: bool) -> Convert:
    members = list(enum)

    def convert(value: Any, ctx: Any) -> Any:
        if isinstance(value, Enum) and any(value is member for member in members):
            return value
        if type(value) is not str or getattr(ctx, "token_normalize_func", None) is not None:
            return _MISS
        wanted = value if case_sensitive else value.casefold()
        for member in members:
            name = str(member.value)
            if (name if case_sensitive else name.casefold()) == wanted:
                return member
        return _MISS

    return convert


def _path(*, file_okay: bool, dir_okay: bool, readable: bool) -> Convert:
    def convert(value: Any, ctx: Any) -> Any:
        if type(value) is str and value and "\0" not in value:
            path = Path(value)
        elif type(value) is type(Path()):
            path = value
        else:
            return _MISS
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return path  # need not exist
        if (not file_okay and stat.S_ISREG(mode)) or (not dir_okay and stat.S_ISDIR(mode)):
            return _MISS  # Typer says which it is
        if readable and not os.access(path, os.R_OK):
            return _MISS
        return path

    return convert
