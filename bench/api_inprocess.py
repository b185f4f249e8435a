r"""The emulator's PATCH path without the HTTP server: a steadier figure than bench/api.py's.

This host's speed drifts between batches of runs, and bench/api.py's throughput with it, so a
change to the PATCH path is judged here: the emulator's ASGI app is driven in-process (no socket,
no uvicorn) with the same store (10 subscriptions selecting every event a PATCH produces) and the
same merge patches, 32 at a time, through the real routes, token check, writer process and store.
It prints the CPU per PATCH of this process (all threads) and of the writer process. For a figure
the host's speed cannot move, count the instructions of both processes, with the same signing key
in both runs (generating an RSA key costs a different number of instructions every time: hundreds
of millions; ``--signing-key`` writes one to the file the first time and reuses it after):

    export PYTHONHASHSEED=0
    for n in 0 20; do
      valgrind --tool=cachegrind --cache-sim=no --trace-children=yes --cachegrind-out-file=/tmp/cg.$n.%p \
        .venv/bin/python bench/api_inprocess.py --rounds $n --signing-key /tmp/bench-key.pem
    done
    # add up the "summary:" line of each run's files (the process and its writer process), then
    # (the 20-round total - the 0-round total) / (20 x 32) = instructions per PATCH

Run: ``.venv/bin/python bench/api_inprocess.py [--rounds 30]``. Results in docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import cpu_seconds

from api import PROFILES, prepare_store

CONCURRENT = 32
Headers = list[tuple[bytes, bytes]]


class InProcess:
    """An emulator app called directly with ASGI scopes."""

    def __init__(self, data_dir: Path) -> None:
        from prefctl.config import paths
        from prefctl.emulator.app import EmulatorContext, create_app

        # Seeded EventIds: the same index pages are touched from run to run.
        self.ctx = EmulatorContext(
            store_path=paths.store_path(data_dir),
            base_url="http://127.0.0.1:8750",
            rng=random.Random(7),
        )
        self.app = create_app(self.ctx)

    async def call(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, Any]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        raw: Headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        raw.append((b"content-length", str(len(body)).encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": raw,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8750),
            "state": {},
        }
        await self.app(scope, receive, send)
        content = b"".join(message.get("body", b"") for message in sent[1:])
        return sent[0]["status"], json.loads(content or b"null")


def store_signing_key(data_dir: Path, pem_path: Path) -> None:
    """Make the key in ``pem_path`` (created there if missing) the store's signing key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from prefctl.config import paths
    from prefctl.emulator.keys import jwk_thumbprint
    from prefctl.store import tokens
    from prefctl.store.db import connect, transaction

    if not pem_path.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        pem_path.chmod(0o600)
    pem = pem_path.read_text()
    private = serialization.load_pem_private_key(pem.encode(), password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    conn = connect(paths.store_path(data_dir))
    try:
        with transaction(conn):
            if not tokens.signing_keys(conn):
                kid = jwk_thumbprint(private.public_key())
                tokens.add_signing_key(conn, tokens.SigningKey(kid, pem, time.time()))
    finally:
        conn.close()


async def run(rounds: int, signing_key: Path | None = None) -> tuple[float, int]:
    """(process CPU seconds of the PATCH rounds, PATCHes sent)."""
    with tempfile.TemporaryDirectory(prefix="prefctl-bench-inprocess-") as tmp:
        data_dir = Path(tmp) / "data"
        creds = prepare_store(data_dir)
        if signing_key is not None:
            store_signing_key(data_dir, signing_key)
        app = InProcess(data_dir)
        basic = base64.b64encode(f"{creds['client_id']}:{creds['client_secret']}".encode())
        form = f"grant_type=client_credentials&scope={creds['account']}/{creds['user_id']}"
        status, answer = await app.call(
            "POST",
            "/oauth2/v1/token",
            form.encode(),
            {
                "Authorization": f"Basic {basic.decode()}",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        assert status == 200, answer
        bearer = f"Bearer {answer['access_token']}"
        api = f"/api/v1/{creds['account']}"
        profile = {"CustomerName": {"FirstName": "Ann", "LastName": "Lee"}, "Tags": ["start"]}
        created = [
            await app.call(
                "POST",
                f"{api}/profiles",
                json.dumps(profile).encode(),
                {"Authorization": bearer, "Content-Type": "application/json"},
            )
            for _ in range(PROFILES)
        ]
        ids = [body["ProfileId"] for _, body in created]
        patch_headers = {"Authorization": bearer, "Content-Type": "application/merge-patch+json"}

        async def patch(n: int) -> None:
            body = json.dumps({"CustomerName": {"FirstName": f"N{n}"}, "Tags": [f"t{n}"]})
            status, answer = await app.call(
                "PATCH", f"{api}/profiles/{ids[n % len(ids)]}", body.encode(), patch_headers
            )
            assert status == 200, answer

        # One round first, in every run: the writer process imports the PATCH path on its first
        # PATCH (about half a second), which is start-up, not the PATCH path.
        await asyncio.gather(*(patch(10**6 + k) for k in range(CONCURRENT)))
        started = cpu_seconds("self")
        for number in range(rounds):
            await asyncio.gather(*(patch(number * CONCURRENT + k) for k in range(CONCURRENT)))
        spent = cpu_seconds("self") - started
        from prefctl.emulator.context import group_writer

        group_writer(app.ctx).stop()
        app.ctx.close()
        return spent, rounds * CONCURRENT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help=f"rounds of {CONCURRENT} PATCHes")
    parser.add_argument(
        "--signing-key",
        type=Path,
        help="PEM file of the emulator's signing key (written the first time): same key, same count",
    )
    options = parser.parse_args()
    spent, patches = asyncio.run(run(options.rounds, options.signing_key))
    if patches:
        print(
            f"{patches} PATCHes in-process: {spent / patches * 1000:.3f} ms CPU per PATCH"
            " (this process and the writer process)"
        )


if __name__ == "__main__":
    main()
