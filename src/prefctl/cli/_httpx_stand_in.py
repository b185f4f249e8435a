"""A stand-in for httpx's own command-line client, which ``import httpx`` loads and prefctl never
runs.

``httpx/__init__.py`` imports ``main`` from ``httpx._main``, which imports click, pygments and
rich.syntax: a third of httpx's import time, paid by every command (docs/performance.md).
:func:`install` puts a stand-in module in ``sys.modules`` under that name before httpx is imported;
calling ``httpx.main`` (or reading any other name of the stand-in) imports the real module and
uses it.

Borrowed internal (CONTRIBUTING.md, "Borrowed internals"): the name ``httpx._main`` and the fact
that httpx's ``__init__`` imports only ``main`` from it. :func:`install` checks, without importing
httpx, that httpx is within ``TESTED_HTTPX`` and that its ``__init__`` imports nothing else from
``_main``; when anything is off it does nothing and httpx is imported as it is (slower, the same
behaviour). ``-v`` says when the stand-in is off and why, ``-vv`` when it is in use.
"""

from __future__ import annotations

import re
import sys
import types
from typing import Any

__all__ = ["TESTED_HTTPX", "install", "log_decision", "problem"]

# httpx releases whose ``__init__`` this module was tested with: [low, high).
TESTED_HTTPX = ((0, 27), (0, 29))

STAND_IN_DOC = "stand-in for httpx's command-line client"
_NAME = "httpx._main"
_VERSION = re.compile(r"""__version__\s*=\s*["'](\d+)\.(\d+)""")
_FROM_MAIN = re.compile(r"from\s+(?:\._main|httpx\._main)\s+import\s+\(?([^)\n]*)\)?")
_ANY_MAIN = re.compile(r"\b_main\b")

_DEBUG, _INFO = 10, 20  # logging's levels (logging is imported only to log them)
# What install() did and why (a log level, a line), for the log once it is configured.
_decision: list[tuple[int, str]] = []


def problem() -> str | None:
    """Why the stand-in would be wrong for the httpx installed (None: it fits). Reads httpx's
    ``__version__.py`` and ``__init__.py`` without importing them."""
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("httpx")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return "httpx is not installed where it can be read"
    package = Path(spec.origin).parent
    try:
        version_text = (package / "__version__.py").read_text(encoding="utf-8")
        init_text = Path(spec.origin).read_text(encoding="utf-8")
    except OSError as exc:
        return f"httpx's sources cannot be read ({exc.strerror})"
    version = _VERSION.search(version_text)
    low, high = TESTED_HTTPX
    found = (int(version[1]), int(version[2])) if version else None
    if found is None or not low <= found < high:
        shown = ".".join(map(str, found)) if found else "(unknown version)"
        tested = f"{'.'.join(map(str, low))} to below {'.'.join(map(str, high))}"
        return f"httpx {shown} is outside the tested {tested}"
    imports = _FROM_MAIN.findall(init_text)
    names = {name.split(" as ")[0].strip() for line in imports for name in line.split(",")}
    names.discard("")
    if names != {"main"} or len(_ANY_MAIN.findall(init_text)) != len(imports):
        wanted = ", ".join(sorted(names)) or "nothing"
        return (
            f"httpx's __init__ uses httpx._main otherwise than 'from ._main import main' ({wanted})"
        )
    return None


def install() -> None:
    """Put the stand-in in place, unless httpx or its client is imported already or
    :func:`problem` finds the stand-in would not fit."""
    if "httpx" in sys.modules or _NAME in sys.modules:
        _decision.append((_DEBUG, "httpx was imported before: its client is the real one"))
        return
    why = problem()
    if why is not None:
        _decision.append((_INFO, f"httpx's command-line client is imported too: {why}"))
        return
    stand_in = types.ModuleType(_NAME, STAND_IN_DOC)

    def real() -> types.ModuleType:
        """The real ``httpx._main``, imported in place of the stand-in."""
        import importlib

        if sys.modules.get(_NAME) is stand_in:
            del sys.modules[_NAME]
        return importlib.import_module(_NAME)

    def main(*args: object, **kwargs: object) -> object:
        return real().main(*args, **kwargs)

    def __getattr__(name: str) -> Any:  # the module's own attribute hook (PEP 562)
        # Any other name (one a later httpx imports, say) comes from the real module.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(real(), name)

    stand_in.main = main  # type: ignore[attr-defined]
    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[_NAME] = stand_in
    _decision.append((_DEBUG, "httpx's command-line client is a stand-in (not imported)"))


def log_decision() -> None:
    """Log what :func:`install` did: at info level when the stand-in is off, debug when on."""
    if _decision:
        import logging

        level, text = _decision[-1]
        logging.getLogger(__name__).log(level, "%s", text)
