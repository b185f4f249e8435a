"""The live inspector page of ``prefctl receive --ui`` (docs/receiver.md), served at ``/_prefctl/``.

The page is static files shipped in the package (``receiver/static/inspector``: plain HTML, CSS
and JavaScript, no build step, nothing from a CDN). Its data:

- ``GET /_prefctl/api/events``: Server-Sent Events. Each message is one batch: a first line
  ``{"type": "batch", "first": F, "last": L, "skipped": S, "total": T}`` and then the NDJSON
  lines of ``prefctl receive -o json`` for requests F to L (their sequence numbers, from 1). The
  stream sends at most ``MAX_PER_MESSAGE`` lines every ``FLUSH_SECONDS``: under a flood (5,000
  deliveries/s) the page gets the newest and ``skipped`` counts the rest, so the browser never
  falls behind. A ``faults`` message carries the fault state whenever it changes.
- ``GET /_prefctl/api/requests/N``: request N as ``--record`` writes it (headers, body, verdict),
  with the ``Service-Webhook`` header parsed into Timestamp and Signature, while it is among the
  last ``KEEP`` requests.
- ``GET /_prefctl/api/requests/N/curl``: request N as a ``curl`` command line aimed at this
  receiver; the ``Service-Webhook`` Signature reads ``REDACTED`` unless ``?signature=1`` (never
  with ``--redact``).
- ``POST /_prefctl/api/requests/N/resend``: request N sent again, as recorded, to the
  ``--forward-to`` handler (409 without one; at most ``MAX_RESENDS`` at once, each within the
  forwarding timeout); the answer is the handler's status, latency and first bytes.
- ``GET /_prefctl/api/search?q=TEXT``: the sequence numbers of kept requests whose body contains
  TEXT (ASCII case ignored; with ``--redact``, the masked body is searched).
- ``GET``/``POST /_prefctl/api/faults``: the fault plan, and changing it (answer the next N with a
  status, add a delay, back to normal): the same ``FaultState`` the fault flags set.

A request number is ASCII digits only: anything else (``²``, ``-1``, ``1e3``) is a 404.

The inspector is a verdict sink like the recorder: it runs in the verdict pump, off the request
path, and with no page open it only appends each batch to a bounded ring. It serves personal data,
so: on only with ``--ui``; with a token (``--ui-token``, as ``?token=`` or the cookie the page
sets) it asks for it on every request, and without one it answers only requests addressed to a
loopback name (a web page of another site cannot reach it by DNS rebinding); ``--redact`` masks
bodies and handler answers as in ``--record``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import random
import re
import shlex
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import orjson

from prefctl.errors import UsageError
from prefctl.hosts import is_loopback
from prefctl.receiver.faults import FaultState, plan_from_options
from prefctl.receiver.forward import _HOP_HEADERS
from prefctl.receiver.recorder import record_line, record_of
from prefctl.receiver.verdict import JSON_OPTIONS, Verdict, json_lines, writable
from prefctl.webhooks.signature import HEADER_NAME, SignatureError, parse_header

if TYPE_CHECKING:
    from prefctl.receiver.app import Message, Receive, ReceiverApp, Scope, Send

__all__ = ["FLUSH_SECONDS", "KEEP", "MAX_PER_MESSAGE", "TOKEN_COOKIE", "UI_PREFIX", "Inspector"]

UI_PREFIX = "/_prefctl/"
TOKEN_COOKIE = "prefctl_ui_token"
KEEP = 500  # requests kept for the detail view
KEEP_BODY_BYTES = 16 * 1024 * 1024  # and at most this many body bytes among them
FLUSH_SECONDS = 0.1
MAX_PER_MESSAGE = 200
MAX_STREAMS = 16
HEARTBEAT_SECONDS = 15.0
MAX_POST_BYTES = 4096
SIGNATURE_SHOWN = 12  # characters of a Signature the page shows (it could be replayed)
MAX_RESENDS = 4  # resends under way at once
MAX_SEARCH = 200  # characters of a search
_SEQ = re.compile(r"[0-9]{1,18}")  # ASCII digits only: str.isdigit() also takes "²"
_SIGNATURE_VALUE = re.compile(r"(Signature=)[^,]*", re.IGNORECASE)

_STATIC = {
    "": ("index.html", b"text/html; charset=utf-8"),
    "index.html": ("index.html", b"text/html; charset=utf-8"),
    "app.js": ("app.js", b"text/javascript; charset=utf-8"),
    "style.css": ("style.css", b"text/css; charset=utf-8"),
}
_SECURITY_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'",
    ),
]
_SIGNATURE_HEADER = HEADER_NAME.lower().encode("latin-1")


def _static(name: str) -> bytes:
    return resources.files("prefctl.receiver").joinpath("static", "inspector", name).read_bytes()


class Inspector:
    """The inspector's ASGI app (``ReceiverApp.ui``) and verdict sink (``sink``)."""

    def __init__(
        self,
        *,
        token: str | None = None,
        redact: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        self.token = token
        self.redact = redact
        self.rng = rng or random.Random()
        self.app: ReceiverApp | None = None
        self.should_stop: Callable[[], bool] = lambda: False
        self._ring: deque[Verdict] = deque()
        self._ring_bytes = 0
        self._faults_version = 0
        self.total = 0  # requests seen (the sequence number of the newest)
        self._streams = 0
        self._resending = 0
        self._files: dict[str, bytes] = {}

    def attach(self, app: ReceiverApp, *, should_stop: Callable[[], bool]) -> None:
        """Serve under ``app``'s /_prefctl path; streams end when ``should_stop()`` is true."""
        self.app = app
        self.should_stop = should_stop
        app.ui = self

    # -- the verdict sink ---------------------------------------------------------------------
    def sink(self, batch: Sequence[Verdict]) -> None:
        """Keep the newest requests (bounded in count and body bytes); runs in the pump."""
        ring = self._ring
        ring.extend(batch)
        self.total += len(batch)
        size = self._ring_bytes
        for verdict in batch:
            body = verdict._body
            if body is not None:
                size += len(body)
        while ring and (len(ring) > KEEP or size > KEEP_BODY_BYTES):
            body = ring.popleft()._body
            if body is not None:
                size -= len(body)
        self._ring_bytes = size

    def _newest(self, after: int, limit: int) -> tuple[int, list[Verdict]]:
        """The first sequence number and the newest ``limit`` verdicts after ``after``."""
        ring = self._ring
        count = min(self.total - after, len(ring), limit)
        if count <= 0:
            return self.total + 1, []
        start = len(ring) - count
        return self.total - count + 1, [ring[i] for i in range(start, len(ring))]

    def _find(self, seq: int) -> Verdict | None:
        index = seq - (self.total - len(self._ring)) - 1
        if 0 <= index < len(self._ring):
            return self._ring[index]
        return None

    # -- the ASGI app -------------------------------------------------------------------------
    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        return self._handle(scope, receive, send)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        headers = dict(scope["headers"])
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        problem = self._refused(headers, query)
        if problem is not None:
            await _respond(send, problem[0], _error(problem[1]))
            return
        if not path.startswith(UI_PREFIX) and path != UI_PREFIX.rstrip("/"):
            await _respond(send, 404, _error(f"no inspector resource {path[:80]}"))
            return
        if path == UI_PREFIX.rstrip("/"):
            await _respond(send, 308, b"", extra=[(b"location", UI_PREFIX.encode())])
            return
        name = path[len(UI_PREFIX) :]
        extra: list[tuple[bytes, bytes]] = []
        if self.token and query.get("token"):
            cookie = f"{TOKEN_COOKIE}={self.token}; Path={UI_PREFIX}; HttpOnly; SameSite=Strict"
            extra.append((b"set-cookie", cookie.encode("latin-1")))
        if name in _STATIC and method in ("GET", "HEAD"):
            file, content_type = _STATIC[name]
            body = self._files.get(file)
            if body is None:
                body = self._files[file] = _static(file)
            await _respond(send, 200, body, content_type=content_type, extra=extra)
        elif name == "api/events" and method == "GET":
            await self._stream(receive, send)
        elif name.startswith("api/requests/"):
            await self._request(scope, headers, query, receive, send, name.split("/")[2:])
        elif name == "api/search" and method == "GET":
            await self._search(send, query.get("q", [""])[0])
        elif name == "api/faults" and method == "GET":
            await _respond(send, 200, orjson.dumps(self.fault_state()))
        elif name == "api/faults" and method == "POST":
            await self._change_faults(headers, receive, send)
        else:
            await _respond(send, 404, _error(f"no inspector resource {path[:80]}"))

    def _refused(
        self, headers: dict[bytes, bytes], query: dict[str, list[str]]
    ) -> tuple[int, str] | None:
        if self.token:
            given = query.get("token", [None])[0] or _cookie(headers.get(b"cookie"), TOKEN_COOKIE)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                return 401, "the inspector needs its token: open /_prefctl/?token=TOKEN"
            return None
        host = headers.get(b"host", b"").decode("latin-1")
        if not is_loopback(f"http://{host}/"):
            return 403, "the inspector answers only at a loopback address (or with --ui-token)"
        return None

    async def _request(
        self,
        scope: Scope,
        headers: dict[bytes, bytes],
        query: dict[str, list[str]],
        receive: Receive,
        send: Send,
        parts: list[str],
    ) -> None:
        """``api/requests/N``, ``…/N/curl`` and ``…/N/resend``."""
        action = parts[1] if len(parts) == 2 else "" if len(parts) == 1 else None
        allowed = {"": "GET", "curl": "GET", "resend": "POST"}.get(action or "")
        if action is None or allowed is None:
            await _respond(send, 404, _error("no inspector resource"))
            return
        if scope["method"] != allowed:
            await _respond(
                send, 405, _error(f"use {allowed}"), extra=[(b"allow", allowed.encode())]
            )
            return
        seq = int(parts[0]) if _SEQ.fullmatch(parts[0]) else 0
        verdict = self._find(seq) if seq else None
        if verdict is None:
            what = "that request is no longer kept" if seq else "there is no such request"
            await _respond(send, 404, _error(f"{what} (the last {KEEP} are kept)"))
            return
        if action == "":
            await _respond(send, 200, self.detail(seq, verdict))
        elif action == "curl":
            host = headers.get(b"host", b"127.0.0.1").decode("latin-1")
            base = f"{scope.get('scheme', 'http')}://{host}"
            signature = query.get("signature", [""])[0] in ("1", "true", "yes")
            command = self.curl(verdict, base_url=base, signature=signature)
            await _respond(send, 200, orjson.dumps({"seq": seq, "curl": command}))
        else:
            if await _read_json_post(headers, receive, send) is not None:
                await self._resend(send, seq, verdict)

    def curl(self, verdict: Verdict, *, base_url: str, signature: bool = False) -> str:
        """Request ``verdict`` as a ``curl`` command line to ``base_url``: its method, headers
        (not the hop-by-hop ones) and body. The ``Service-Webhook`` Signature reads ``REDACTED``
        unless ``signature`` (and never with ``--redact``, whose body is masked anyway)."""
        words = ["curl", "-X", verdict.method, base_url + verdict.path]
        for name, value in verdict.headers or ():
            if name.lower() in _HOP_HEADERS:
                continue
            text = value.decode("latin-1")
            if name.lower() == _SIGNATURE_HEADER and (self.redact or not signature):
                text = _SIGNATURE_VALUE.sub(r"\1REDACTED", text)
            words += ["-H", f"{name.decode('latin-1')}: {text}"]
        if verdict.body:
            if self.redact:
                record = record_of(verdict, redact=True)
                shown = record.get("body_text") or orjson.dumps(record["body"]).decode()
            else:
                shown = verdict.body.decode("utf-8", errors="replace")
            words += ["--data-binary", shown]
        return " ".join(shlex.quote(word) for word in words)

    async def _resend(self, send: Send, seq: int, verdict: Verdict) -> None:
        forwarder = self.app.forwarder if self.app is not None else None
        if forwarder is None:
            await _respond(
                send, 409, _error("there is no handler to resend to: start with --forward-to URL")
            )
            return
        if verdict.method != "POST" or verdict.headers is None:
            await _respond(send, 409, _error("only a POST that was kept whole can be resent"))
            return
        if self._resending >= MAX_RESENDS:
            await _respond(send, 429, _error(f"at most {MAX_RESENDS} resends at once"))
            return
        self._resending += 1
        try:
            answer = await forwarder.forward(list(verdict.headers), verdict.body or b"")
        finally:
            self._resending -= 1
        result = answer.result
        body = result.body
        if self.redact and body:
            body = orjson.loads(record_line(_with_forward(verdict, result), redact=True))[
                "verdict"
            ]["forward"]["body"]
        shown = {
            "seq": seq,
            "target": forwarder.url,
            "status": result.status,
            "latency_ms": result.latency_ms,
            "body": body,
            "error": result.error,
        }
        await _respond(send, 200, orjson.dumps(shown))

    async def _search(self, send: Send, text: str) -> None:
        if not 1 <= len(text) <= MAX_SEARCH:
            await _respond(send, 400, _error(f"search for 1 to {MAX_SEARCH} characters"))
            return
        await _respond(send, 200, orjson.dumps({"q": text, "seqs": self.search(text)}))

    def search(self, text: str) -> list[int]:
        """The sequence numbers of kept requests whose body holds ``text`` (ASCII case ignored;
        with ``--redact``, in the masked recording)."""
        needle = text.lower().encode("utf-8")
        first = self.total - len(self._ring) + 1
        found = []
        for index, verdict in enumerate(self._ring):
            body = verdict.body
            if not body:
                continue
            if self.redact:
                record = record_of(verdict, redact=True)
                body = orjson.dumps([record["body"], record.get("body_text")])
            if needle in body.lower():
                found.append(first + index)
        return found

    def detail(self, seq: int, verdict: Verdict) -> bytes:
        """Request ``seq`` as the page shows it: the recording, and the parsed signature header."""
        raw = dict(verdict._headers or ())
        header = raw.get(_SIGNATURE_HEADER)
        parsed: dict[str, Any] | None = None
        if header is not None:
            try:
                timestamp, signature = parse_header(header.decode("latin-1"))
            except SignatureError as exc:
                parsed = {"error": exc.message}
            else:
                shown = signature[:SIGNATURE_SHOWN] + (
                    "…" if len(signature) > SIGNATURE_SHOWN else ""
                )
                parsed = {"timestamp": timestamp, "signature": shown}
        head = orjson.dumps({"seq": seq, "signature_header": parsed})
        return head[:-1] + b',"record":' + record_line(verdict, redact=self.redact) + b"}"

    def feed_lines(self, verdicts: Sequence[Verdict]) -> bytes:
        """The ``-o json`` lines of ``verdicts``; with ``--redact``, the handler answers masked."""
        if not self.redact or all(v.forward is None for v in verdicts):
            return json_lines(verdicts)
        lines = []
        for verdict in verdicts:
            if verdict.forward is None:
                lines.append(verdict.as_json())
            else:
                shown = orjson.loads(record_line(verdict, redact=True))["verdict"]
                lines.append(orjson.dumps(shown, option=JSON_OPTIONS))
        return b"\n".join(lines)

    async def _stream(self, receive: Receive, send: Send) -> None:
        if self._streams >= MAX_STREAMS:
            await _respond(send, 503, _error(f"at most {MAX_STREAMS} inspector pages at once"))
            return
        self._streams += 1
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), *_SECURITY_HEADERS],
                }
            )
            # The newest kept requests first, then whatever arrives.
            sent = max(self.total - MAX_PER_MESSAGE, 0)
            faults_sent: tuple[int, dict[str, Any]] | None = None
            await _chunk(send, b"retry: 1000\n\n")
            loop = asyncio.get_running_loop()
            quiet_since = loop.time()
            while not gone.done() and not self.should_stop():
                parts = []
                # Changed by a page (which then shows the answer to its change), or used up by
                # events, perhaps back to what this page was last sent: the version tells.
                faults = (self._faults_version, self.fault_state())
                if faults != faults_sent:
                    faults_sent = faults
                    parts.append(b"event: faults\ndata: " + orjson.dumps(faults[1]))
                if self.total > sent:
                    parts.append(self._message(sent))
                    sent = self.total
                if parts:
                    await _chunk(send, b"\n\n".join(parts) + b"\n\n")
                    quiet_since = loop.time()
                elif loop.time() - quiet_since > HEARTBEAT_SECONDS:
                    await _chunk(send, b": keep-alive\n\n")
                    quiet_since = loop.time()
                await asyncio.wait({gone}, timeout=FLUSH_SECONDS)
            if not gone.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self._streams -= 1
            gone.cancel()

    def _message(self, sent: int) -> bytes:
        first, verdicts = self._newest(sent, MAX_PER_MESSAGE)
        skipped = self.total - sent - len(verdicts)
        meta = {
            "type": "batch",
            "first": first,
            "last": self.total,
            "skipped": skipped,
            "total": self.total,
        }
        lines = self.feed_lines([writable(v) for v in verdicts]) if verdicts else b""
        data = orjson.dumps(meta) + (b"\n" + lines if lines else b"")
        return f"id: {self.total}\n".encode() + b"data: " + data.replace(b"\n", b"\ndata: ")

    # -- faults -------------------------------------------------------------------------------
    def fault_state(self) -> dict[str, Any]:
        """What the fault plan is now (``none`` when events are answered normally)."""
        faults = self.app.faults if self.app is not None else None
        if faults is None:
            return {"type": "faults", "plan": "none", "delay": 0.0}
        return {"type": "faults", "plan": faults.describe(), "delay": faults.plan.delay}

    def change_faults(self, change: dict[str, Any]) -> None:
        """Apply one change from the page; a UsageError when it is not a sensible one.

        ``fail``: answer the next ``count`` events ``status`` (keeping any delay); ``delay``: add
        ``seconds`` to every answer (keeping the rest of the plan); ``normal``: no faults at all.
        """
        app = self.app
        if app is None:
            raise UsageError("the receiver is not running")
        action = change.get("action")
        current = app.faults
        delay = current.plan.delay if current is not None else 0.0
        if action == "normal":
            app.faults = None
        elif action == "fail":
            count, status = change.get("count"), change.get("status")
            if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 1_000_000:
                raise UsageError("count must be a whole number of events from 1 to 1000000")
            if not isinstance(status, int) or isinstance(status, bool):
                raise UsageError("status must be an HTTP status from 200 to 599")
            plan = plan_from_options(fail_first=count, fail_status=status, delay=delay)
            app.faults = FaultState(plan, self.rng) if plan is not None else None
        elif action == "delay":
            seconds = change.get("seconds")
            if not isinstance(seconds, int | float) or isinstance(seconds, bool):
                raise UsageError("seconds must be a number")
            plan = plan_from_options(delay=float(seconds))  # checks the range
            if current is not None:
                current.plan = dataclasses.replace(current.plan, delay=float(seconds))
            elif plan is not None:
                app.faults = FaultState(plan, self.rng)
        else:
            raise UsageError("action must be fail, delay or normal")
        self._faults_version += 1

    async def _change_faults(
        self, headers: dict[bytes, bytes], receive: Receive, send: Send
    ) -> None:
        change = await _read_json_post(headers, receive, send)
        if change is None:
            return
        try:
            self.change_faults(change)
        except UsageError as exc:
            await _respond(send, 400, _error(exc.message))
            return
        await _respond(send, 200, orjson.dumps(self.fault_state()))


def _with_forward(verdict: Verdict, result: Any) -> Verdict:
    return dataclasses.replace(verdict, forward=result)


async def _read_json_post(
    headers: dict[bytes, bytes], receive: Receive, send: Send
) -> dict[str, Any] | None:
    """The small JSON object a page POSTs; None once an error has been answered."""
    # JSON only: a form post from another site cannot send it without a CORS preflight.
    if headers.get(b"content-type", b"").split(b";")[0].strip() != b"application/json":
        await _respond(send, 415, _error("send the change as application/json"))
        return None
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if len(body) > MAX_POST_BYTES:
            await _respond(send, 413, _error("a change is a small JSON object"))
            return None
        if not message.get("more_body", False):
            break
    try:
        change = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        await _respond(send, 400, _error("the body is not JSON"))
        return None
    if not isinstance(change, dict):
        await _respond(send, 400, _error("send a JSON object"))
        return None
    return change


async def _disconnected(receive: Receive) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _chunk(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: bytes = b"application/json",
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [
        (b"content-length", str(len(body)).encode()),
        (b"content-type", content_type),
        *_SECURITY_HEADERS,
        *(extra or ()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _error(detail: str) -> bytes:
    return orjson.dumps({"error": detail})


def _cookie(header: bytes | None, name: str) -> str | None:
    if not header:
        return None
    for part in header.decode("latin-1").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None
