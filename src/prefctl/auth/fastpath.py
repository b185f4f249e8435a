"""``prefctl token get`` served from the cache before the CLI loads.

``TOKEN=$(prefctl token get)`` runs in scripts, often once per request. Loading Typer, Rich, httpx
and pydantic would cost ~0.5 s each time, so ``__main__`` first asks ``serve_cached_token``: when
the command line is exactly ``[global options] token get [--scope S]`` and the cache holds a fresh
token for the resolved profile, the token is printed from here and nothing heavy is imported.

In every other case (other flags, ``-v``, JSON output, no fresh token, a configuration problem or
warning, stdout that cannot be written) it returns False and the full CLI runs, which does the same
work with its messages and error handling. Only ``config``, ``cache.py`` and ``clock.py`` are
imported here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from prefctl.config import ENV_OUTPUT

__all__ = ["FastRequest", "parse", "serve_cached_token"]

_FLAG_GLOBALS = frozenset({"-q", "--quiet", "--no-color"})
_VALUE_GLOBALS = {"-p": "profile", "--profile": "profile", "--config": "config"}
_OUTPUT_OPTIONS = frozenset({"-o", "--output"})


@dataclass(frozen=True)
class FastRequest:
    """What a fast-path command line asked for."""

    profile: str | None = None
    config: str | None = None
    scope: str | None = None


def parse(argv: Sequence[str]) -> FastRequest | None:
    """The request when ``argv`` is ``[global options] token get [--scope S]``, else None."""
    values: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name, eq, inline = argv[i].partition("=")
        if name in _FLAG_GLOBALS and not eq:
            i += 1
            continue
        if name not in _VALUE_GLOBALS and name not in _OUTPUT_OPTIONS:
            return None
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        else:
            return None
        if name in _OUTPUT_OPTIONS:
            if value != "table":
                return None
        else:
            values[_VALUE_GLOBALS[name]] = value
    rest = list(argv[i:])
    if rest[:2] != ["token", "get"]:
        return None
    options = rest[2:]
    if not options:
        return FastRequest(values.get("profile"), values.get("config"))
    if len(options) == 2 and options[0] == "--scope":
        scope = options[1]
    elif len(options) == 1 and options[0].startswith("--scope="):
        scope = options[0].partition("=")[2]
    else:
        return None
    if not scope or scope.startswith("-"):
        return None
    return FastRequest(values.get("profile"), values.get("config"), scope)


def cached_token(request: FastRequest, env: Mapping[str, str]) -> str | None:
    """The fresh cached token ``request`` resolves to, or None when the full CLI must decide."""
    from prefctl.auth.cache import TokenCache
    from prefctl.clock import SystemClock
    from prefctl.config import config_path, load_config, resolve_profile
    from prefctl.errors import PrefctlError

    if env.get(ENV_OUTPUT, "table") != "table":
        return None
    try:
        cfg = load_config(config_path(request.config, env))
        if cfg.warnings():
            return None
        profile = resolve_profile(cfg, request.profile, env=env)
        if not profile.auth_url or not profile.client_id or profile.check_service_urls():
            return None  # the full CLI reports what is missing, and warns of plain http
        scope = request.scope or profile.scope
    except PrefctlError:
        return None
    cache = TokenCache.default(SystemClock(), env)
    token = cache.fresh(profile.auth_url, profile.client_id, scope)
    return None if token is None else token.access_token


def serve_cached_token(
    argv: Sequence[str], env: Mapping[str, str] | None = None, stdout: TextIO | None = None
) -> bool:
    """Print the cached token and return True if ``argv`` can be answered from the cache."""
    request = parse(argv)
    if request is None:
        return False
    token = cached_token(request, os.environ if env is None else env)
    if token is None:
        return False
    out = stdout or sys.stdout
    if out is None:  # stdout closed (`>&-`)
        return False
    try:
        out.write(token + "\n")
        out.flush()
    except OSError:
        # A full disk or a pipe closed by its reader: the full CLI writes again and reports it
        # (one line, or quietly for the pipe), so the wording lives in one place.
        return False
    return True
