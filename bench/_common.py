"""What the bench scripts share: free ports, waiting for a server, nginx as the ceiling, the
CPU time of a server and its child processes, and the store to measure on (SQLite, or
PostgreSQL: a server's URL or a throwaway cluster).

Bench scripts run as ``python bench/NAME.py``, so this folder is on ``sys.path``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_DATABASES = itertools.count(1)
_POSTMASTERS: dict[str, int] = {}  # host:port → postmaster PID of the clusters started here


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """Poll ``url`` until it answers 200 (bounded); stop if ``process`` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited early with code {process.returncode}: {url}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"server at {url} did not become healthy within {timeout:g} s")


def start_nginx(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    """nginx answering 200 to everything on 127.0.0.1:``port``, with its files under ``tmp``:
    the machine's ceiling beside which prefctl's servers and clients are measured."""
    prefix = tmp / "nginx"
    prefix.mkdir()
    conf = prefix / "nginx.conf"
    conf.write_text(
        f"""daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
worker_rlimit_nofile 20000;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location / {{ return 200; }}
  }}
}}
"""
    )
    return subprocess.Popen(
        ["nginx", "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
    )


def own_cpu_seconds(pid: int | str) -> float:
    """User + system CPU seconds so far of process ``pid`` ("self" for this one); 0.0 once it
    has ended."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int | str) -> list[int]:
    """The live child processes of ``pid``, started by any of its threads (nginx's worker, the
    emulator's writer process)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def cpu_seconds(pid: int | str) -> float:
    """CPU seconds so far of process ``pid`` and of its live descendants (the emulator's writer
    process; with ``--workers``, its API workers and theirs)."""
    return own_cpu_seconds(pid) + sum(cpu_seconds(child) for child in child_pids(pid))


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """``--store postgresql://…`` and ``--postgres``: where a bench script keeps its store
    (default: a SQLite file in a temporary folder, as before). See ``postgres_location``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--store",
        metavar="URL",
        help="a PostgreSQL server's URL (postgresql://USER@HOST:PORT/DB, a role that may create "
        "databases): each measurement runs in a new database there, dropped at the end",
    )
    group.add_argument(
        "--postgres",
        action="store_true",
        help="start a throwaway PostgreSQL cluster (scripts/pg_cluster.py) and measure on it",
    )


@contextlib.contextmanager
def postgres_server(options: argparse.Namespace) -> Iterator[str | None]:
    """The PostgreSQL server's URL that ``add_store_options`` asked for (None: SQLite): the
    ``--store`` URL, or with ``--postgres`` a throwaway cluster started here and stopped (its
    folder removed) when the block ends."""
    if options.store:
        yield options.store
        return
    if not options.postgres:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="prefctl-bench-pg-"))
    script = [sys.executable, str(ROOT / "scripts" / "pg_cluster.py")]
    try:
        done = subprocess.run(
            [*script, "start", "--dir", str(folder)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr.strip() or "pg_cluster.py start failed")
        url = done.stdout.strip()
        pid_file = folder / "data" / "postmaster.pid"
        _POSTMASTERS[_server_of(url)] = int(pid_file.read_text().split()[0])
        yield url
    finally:
        subprocess.run([*script, "stop", str(folder)], check=False)


@contextlib.contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new, empty database on the PostgreSQL ``server`` (its URL), dropped when the block
    ends: each measurement starts from nothing, and a shared server keeps no bench data."""
    import psycopg

    name = f"prefctl_bench_{os.getpid()}_{next(_DATABASES)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urllib.parse.urlsplit(server)
    try:
        yield urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def backend_name(location: str | None) -> str:
    """ "PostgreSQL" or "SQLite", for the printed results."""
    return "PostgreSQL" if location else "SQLite"


def _server_of(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc.rpartition("@")[2]


def database_cpu_seconds(location: str | None) -> float | None:
    """CPU seconds so far of the PostgreSQL server of ``location`` (the postmaster and its
    backends), when it is a throwaway cluster of ``postgres_server``; None otherwise (a SQLite
    store, whose work is in its callers' processes, or a server measured elsewhere)."""
    pid = _POSTMASTERS.get(_server_of(location)) if location else None
    if pid is None:
        return None
    try:  # the postmaster's own time and that of the backends it has reaped (cutime, cstime)
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return reaped + cpu_seconds(pid)
