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
    """Spare each command the import of httpx's own command-line client, guarded: see
    ``prefctl.cli._httpx_stand_in``."""
    from prefctl.cli._httpx_stand_in import install

    install()


if __name__ == "__main__":
    main()
