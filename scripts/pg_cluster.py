"""A throwaway PostgreSQL cluster for the tests and benchmarks on the PostgreSQL store.

    python scripts/pg_cluster.py start [--dir DIR]   # prints the URL of its superuser on stdout
    python scripts/pg_cluster.py stop DIR
    python scripts/pg_cluster.py restart DIR         # fast restart, same port (fault tests)

``start`` runs initdb in DIR (a new temporary folder when not given; the cluster is in DIR/data),
then starts the server on a free port of 127.0.0.1 with its socket in DIR, and prints
``postgresql://prefctl@127.0.0.1:PORT/postgres``. Local connections are trusted, except for the
role ``prefctl_password`` (password ``prefctl-test-password``), which must give its password: the
tests of a refused password use it. The server runs without fsync (a throwaway: speed over
durability). ``stop DIR`` stops it (fast shutdown) and removes DIR.

PostgreSQL refuses to run as root: when run as root, initdb and the server run as ``nobody``
(``runuser -u nobody --``), which then owns DIR. The binaries are found on PATH, else in
/usr/lib/postgresql/*/bin (Debian's layout). Exit 2 with one line when they are missing.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

SUPERUSER = "prefctl"
PASSWORD_ROLE = "prefctl_password"
PASSWORD = "prefctl-test-password"  # a throwaway cluster's test role
UNPRIVILEGED = "nobody"
START_TRIES = 3


def binary(name: str) -> str | None:
    """The path of the PostgreSQL program ``name``, or None when it is not installed."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", UNPRIVILEGED, "--", *argv] if os.geteuid() == 0 else argv


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(argv: list[str], **kwargs: object) -> None:
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]


def start(folder: Path | None) -> str:
    """Create and start a cluster in ``folder``; its superuser's URL."""
    initdb, pg_ctl, psql = binary("initdb"), binary("pg_ctl"), binary("psql")
    if not (initdb and pg_ctl and psql):
        raise SystemExit("pg_cluster: PostgreSQL's initdb, pg_ctl and psql are not installed")
    folder = Path(tempfile.mkdtemp(prefix="prefctl-pg-")) if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(folder, UNPRIVILEGED)
    data = folder / "data"
    _run(
        _as_owner([initdb, "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8"]),
        stdout=subprocess.DEVNULL,
    )
    hba = (
        f"local all all trust\n"
        f"host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n"
        f"host all all 127.0.0.1/32 trust\n"
    )
    (data / "pg_hba.conf").write_text(hba)  # as the owner's file (root writes it in place)
    for attempt in range(START_TRIES):  # a free port may be taken before the server binds it
        port = _free_port()
        options = (
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -F -c max_connections=300"
            " -c shared_buffers=64MB"
        )
        argv = [pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-o", options, "-w", "start"]
        done = subprocess.run(_as_owner(argv), stdin=subprocess.DEVNULL, capture_output=True)
        if done.returncode == 0:
            break
        if attempt == START_TRIES - 1:
            log = (folder / "log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"pg_cluster: the server did not start:\n{log}")
    sql = f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD}'"
    _run(
        [psql, "-h", "127.0.0.1", "-p", str(port), "-U", SUPERUSER, "-d", "postgres", "-qc", sql],
        stdout=subprocess.DEVNULL,
    )
    return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres"


def stop(folder: Path) -> None:
    """Stop the cluster in ``folder`` (if it runs) and remove the folder."""
    pg_ctl = binary("pg_ctl")
    data = folder / "data"
    if pg_ctl and (data / "postmaster.pid").exists():
        subprocess.run(
            _as_owner([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            check=False,
        )
    shutil.rmtree(folder, ignore_errors=True)


def restart(folder: Path) -> None:
    """Restart the cluster in ``folder`` (fast: open connections are cut), on the same port and
    options; returns once it accepts connections again. For the tests of a server restart."""
    pg_ctl = binary("pg_ctl")
    if not pg_ctl:
        raise SystemExit("pg_cluster: PostgreSQL's pg_ctl is not installed")
    argv = [pg_ctl, "-D", str(folder / "data"), "-l", str(folder / "log"), "-m", "fast", "-w"]
    _run(_as_owner([*argv, "restart"]), stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    start_parser = commands.add_parser("start", help="create and start a cluster; print its URL")
    start_parser.add_argument("--dir", type=Path, help="the folder to create it in")
    stop_parser = commands.add_parser("stop", help="stop the cluster in DIR and remove DIR")
    stop_parser.add_argument("dir", type=Path)
    restart_parser = commands.add_parser("restart", help="restart the cluster in DIR (fast)")
    restart_parser.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "start":
        print(start(args.dir), flush=True)
    elif args.command == "restart":
        restart(args.dir)
    else:
        stop(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
