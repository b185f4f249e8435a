"""Entry point of the ``prefctl`` console script.

``--version`` and a cached ``token get`` are answered before Typer, Rich, httpx or pydantic are
imported: scripts call ``TOKEN=$(prefctl token get)`` often, and start-up time is their latency.
"""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv == ["--version"] and sys.stdout is not None:
        from prefctl import __version__

        try:
            sys.stdout.write(f"prefctl {__version__}\n")
            sys.stdout.flush()
            return
        except OSError:
            pass  # the CLI writes it again and reports the failure in one line
    if "token" in argv and "get" in argv:
        from prefctl.auth.fastpath import serve_cached_token

        if serve_cached_token(argv):
            return
    _without_httpx_cli()
    if "--help" in argv or "-h" in argv:
        from prefctl.cli import help_cache

        if help_cache.asks_for_help(argv):
            if help_cache.serve(argv):
                return
            from prefctl.cli.app import run

            sys.exit(help_cache.run_and_store(argv, run))
    from prefctl.cli.app import run

    sys.exit(run(argv))


def _without_httpx_cli() -> None:
    """Spare each command the import of httpx's own command-line client, which ``import httpx``
    loads (``httpx._main``: click, pygments, rich.syntax; a third of httpx's import time) and
    prefctl never runs. A stand-in takes its place; calling ``httpx.main`` still runs the real
    one. Guarded: nothing is done once httpx or its client is imported, and a later httpx that
    no longer imports it never reads the stand-in."""
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    import types

    def main(*args: object, **kwargs: object) -> object:
        del sys.modules["httpx._main"]
        from httpx._main import main as real

        return real(*args, **kwargs)

    stand_in = types.ModuleType("httpx._main", "stand-in for httpx's command-line client")
    stand_in.main = main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = stand_in


if __name__ == "__main__":
    main()
