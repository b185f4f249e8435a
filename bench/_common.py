"""What the bench scripts share: free ports, waiting for a server, nginx as the ceiling, and the
CPU time of a server and its child processes.

Bench scripts run as ``python bench/NAME.py``, so this folder is on ``sys.path``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


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
