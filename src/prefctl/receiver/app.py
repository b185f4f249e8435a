"""The receiver's ASGI application: a plain ASGI callable, no framework on the webhook path.

When the server was chosen, uvicorn measured with a plain ASGI app at 13.2k verified requests/s, Starlette routing at
6.3k and FastAPI at 2.9k; so routing here is two string comparisons, responses are prebuilt
messages, and everything that is not needed for the answer (tracking, display, recording) happens
later, in batches, in the verdict pump (``receiver.pump``).

One POST to the webhook path goes through, in order:

1. ``Content-Length`` over the body limit → 413; a non-JSON ``Content-Type`` → 415; the body is
   read up to the limit (413 as soon as it is exceeded, nothing more is buffered).
2. Two or more ``Service-Webhook`` headers → 401 ``repeated_header``, with or without verification
   (one is never picked: proxies and frameworks disagree on which one counts). A single one is
   verified when verification is on: bad, stale or future → 401.
3. The body must be a JSON object with string ``EventId`` and ``EventType`` → else 400.
4. ``subscription.validation`` (no signature needed): answered ``{"validationResponse": code}``, or
   200 ``{}`` in manual mode (the validationUrl is shown, and GET by ``--auto-validate`` when its
   host is trusted: ``receiver.validation``); without a code (or without a validationUrl in manual
   mode) → 400.
5. An event without a signature while verification is on → 401.
6. Faults (``--respond``, ``--fail-first``…) decide the answer of authentic events; otherwise the
   event is forwarded (``--forward-to``, the handler's answer is mirrored) or answered 200.

Every request to the webhook path, and to unknown paths, yields a ``Verdict``; ``/healthz`` does not.
No input makes it answer 5xx unless a fault or the forwarded handler asks for it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import msgspec
import orjson

from prefctl.clock import Clock
from prefctl.receiver.faults import FaultState
from prefctl.receiver.forward import Forwarder
from prefctl.receiver.validation import AutoValidator
from prefctl.receiver.verdict import Kind, SignatureResult, Verdict
from prefctl.webhooks.handshake import VALIDATION_EVENT_TYPE, build_reply, validation_fields
from prefctl.webhooks.signature import SignatureError, Verifier

__all__ = ["DEFAULT_MAX_BODY_BYTES", "HEALTH_PATH", "OK", "UI_PATH", "Answer", "ReceiverApp"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_log = logging.getLogger("prefctl.receiver")

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
HEALTH_PATH = "/healthz"
UI_PATH = "/_prefctl"  # the inspector page of ``receive --ui`` (never the webhook path)

_SIGNATURE = b"service-webhook"
_CONTENT_TYPE = b"content-type"
_CONTENT_LENGTH = b"content-length"
_JSON = b"application/json"


class _Head(msgspec.Struct, rename="pascal", gc=False):
    """The top-level fields of a message that its answer depends on (and the display shows).

    Reading only these is four times cheaper than building the whole body with ``orjson.loads``
    (which was the receiver's costliest step): msgspec checks the syntax of the rest of the body but
    makes no objects for it. Whatever it refuses goes to orjson, which decides and words the error,
    so the answers are orjson's except on one point: a number too large for a double (``1e999``)
    outside these fields is valid JSON to msgspec, and so to the receiver.
    """

    event_type: Any = None
    event_id: Any = None
    event_time: Any = None
    profile_id: Any = None
    subscription_id: Any = None


_decode_head = msgspec.json.Decoder(_Head).decode


class ReceiverApp:
    """The ASGI app of ``prefctl receive``; see the module docstring for what it answers."""

    def __init__(
        self,
        *,
        push: Callable[[Verdict], None],
        clock: Clock,
        path: str = "/webhooks",
        verifier: Verifier | None = None,
        faults: FaultState | None = None,
        manual_validation: bool = False,
        validator: AutoValidator | None = None,
        forwarder: Forwarder | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        keep_request: bool = False,
    ) -> None:
        self.push = push
        self.clock = clock
        self.path = path
        self.verifier = verifier
        self.faults = faults
        self.manual_validation = manual_validation
        self.validator = validator
        self.forwarder = forwarder
        self.max_body_bytes = max_body_bytes
        # Verdicts keep the raw headers and body only for the recorder: a request's memory is
        # then freed (and reused, still in the CPU's cache) as soon as it is answered.
        self.keep_request = keep_request
        # The inspector page (``receive --ui``, ``receiver.inspector``): requests under /_prefctl.
        self.ui: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # A plain method that returns the handler's coroutine: one coroutine per request, not two.
        kind = scope["type"]
        if kind != "http":
            return _lifespan(receive, send) if kind == "lifespan" else _nothing()
        path = scope["path"]
        method = scope["method"]
        if path == self.path and method == "POST":
            return self._webhook(scope, receive, send)
        if path == HEALTH_PATH and method in ("GET", "HEAD"):
            return _HEALTHY.send(send)
        if self.ui is not None and path.startswith(UI_PATH):
            return self.ui(scope, receive, send)
        return self._other(scope, send, path, method)

    async def _other(self, scope: Scope, send: Send, path: str, method: str) -> None:
        verdict = Verdict(
            time=self.clock.now(),
            kind=Kind.OTHER,
            status=404,
            method=method,
            path=path,
            _headers=scope["headers"] if self.keep_request else None,
        )
        if path in (self.path, HEALTH_PATH):
            allow = b"POST" if path == self.path else b"GET, HEAD"
            verdict.status, verdict.reason = 405, "method_not_allowed"
            verdict.detail = f"{method} is not allowed here (use {allow.decode()})"
            answer = Answer(405, _error(verdict.reason, verdict.detail), extra=[(b"allow", allow)])
        else:
            verdict.reason = "not_found"
            verdict.detail = f"not the webhook path {self.path}"
            answer = Answer(404, _error(verdict.reason, verdict.detail))
        await answer.send(send)
        self.push(verdict)

    async def _webhook(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        verdict, signature, answer = self.begin(headers)
        if answer is None:
            body = await self._read_body(receive)
            if body is None:
                return  # the client went away before sending the body
            answer = self.finish(verdict, signature, body)
            if answer is None:
                answer = await self._event(verdict, headers, body)
                if answer is None:
                    await _reset(send)
                    self.push(verdict)
                    return
        await answer.send(send)
        self.push(verdict)

    @property
    def synchronous(self) -> bool:
        """Whether ``begin``/``finish`` answer every request (no fault plan, no forwarding)."""
        return self.faults is None and self.forwarder is None

    def begin(
        self, headers: list[tuple[bytes, bytes]]
    ) -> tuple[Verdict, bytes | None, Answer | None]:
        """Start a POST to the webhook path from its headers: its verdict, its signature header,
        and the answer when the headers alone decide it (413 by Content-Length, 415).

        The ASGI handler and the receiver's HTTP protocol (``receiver.protocol``) share this and
        ``finish``: they are the webhook path's decisions, and every line runs for every event.
        """
        # Names arrive lower-cased, every header line apart (a repeated one appears twice).
        by_name = dict(headers)
        signature: bytes | None = by_name.get(_SIGNATURE)
        content_type: bytes | None = by_name.get(_CONTENT_TYPE)
        length: bytes | None = by_name.get(_CONTENT_LENGTH)
        # Positional (type, time, kind, method, path, status): the cheapest way to build one.
        verdict = Verdict("request", self.clock.now(), Kind.INVALID, "POST", self.path, 400)
        if self.keep_request:
            verdict._headers = headers
        if len(by_name) != len(headers) and signature is not None:
            # Some header is repeated (rare: the check above costs one comparison per request).
            count = sum([name == _SIGNATURE for name, _ in headers])
            if count > 1:
                verdict.signature = SignatureResult.INVALID
                detail = f"the request has {count} Service-Webhook headers: send exactly one"
                return verdict, None, _reject(verdict, 401, "repeated_header", detail)
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            return verdict, signature, self._too_large(verdict)
        if content_type is not None and content_type != _JSON and not _is_json(content_type):
            ctype = content_type.decode("latin-1")[:80]
            detail = f"Content-Type {ctype!r} is not JSON"
            return verdict, signature, _reject(verdict, 415, "unsupported_media_type", detail)
        return verdict, signature, None

    def finish(self, verdict: Verdict, signature: bytes | None, body: bytes) -> Answer | None:
        """The answer to a webhook request whose whole ``body`` arrived (or more than the limit).

        None for an authentic event when a fault plan or forwarding decides its answer (``_event``).
        """
        if self.keep_request:
            verdict._body = body
        if len(body) > self.max_body_bytes:
            return self._too_large(verdict)

        verifier = self.verifier
        if verifier is None:
            verdict.signature = SignatureResult.UNVERIFIED
        elif signature is not None:
            try:
                verifier.verify(signature.decode("latin-1"), now=verdict.time)
            except SignatureError as exc:
                verdict.signature = SignatureResult.INVALID
                _describe_message(verdict, body)
                return _reject(verdict, 401, exc.reason, exc.message)
            verdict.signature = SignatureResult.VALID
        else:
            verdict.signature = SignatureResult.MISSING

        # The fields the answer depends on, read without building the rest of the body.
        head: _Head | None = None
        if body.isascii() or _is_utf8(body):
            try:
                head = _decode_head(body)
            except (msgspec.DecodeError, RecursionError):
                pass
        message: dict[str, Any] | None = None
        if head is None:
            # Non-ASCII or refused by the fast reader: orjson decides, and words the error.
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                return _reject(verdict, 400, "not_json", f"body is not JSON: {exc}")
            if type(parsed) is not dict:
                detail = f"body is a JSON {_json_type(parsed)}, not an object"
                return _reject(verdict, 400, "not_an_object", detail)
            message = parsed
            get = parsed.get
            head = _Head(
                get("EventType"),
                get("EventId"),
                get("EventTime"),
                get("ProfileId"),
                get("SubscriptionId"),
            )
        event_type = head.event_type
        event_id = head.event_id
        event_time = head.event_time
        verdict.profile_id = head.profile_id
        verdict.subscription_id = head.subscription_id
        if type(event_time) is str:
            verdict.event_time = event_time
        if type(event_type) is not str or not event_type:
            return _reject(verdict, 400, "no_event_type", "no EventType string")
        verdict.event_type = event_type
        if type(event_id) is not str or not event_id:
            return _reject(verdict, 400, "no_event_id", "no EventId string")
        verdict.event_id = event_id

        if event_type == VALIDATION_EVENT_TYPE:
            verdict.kind = Kind.HANDSHAKE
            if verdict.signature != SignatureResult.VALID:
                verdict.signature = SignatureResult.NOT_REQUIRED
            if message is None:
                try:
                    message = orjson.loads(body)
                except orjson.JSONDecodeError as exc:  # valid JSON that orjson refuses (1e999)
                    return _reject(verdict, 400, "not_json", f"body is not JSON: {exc}")
            return self._handshake(verdict, message)
        verdict.kind = Kind.EVENT
        if verdict.signature == SignatureResult.MISSING:
            detail = "no Service-Webhook header (only handshakes are unsigned)"
            return _reject(verdict, 401, "missing", detail)
        if self.synchronous:
            verdict.status = 200
            return OK
        return None

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body (or the first part past the limit); None if the client went away."""
        received = await receive()
        if received["type"] != "http.request":
            return None
        body: bytes = received.get("body", b"")
        if not received.get("more_body", False):
            return body
        buffer = bytearray(body)
        limit = self.max_body_bytes
        while True:
            received = await receive()
            if received["type"] != "http.request":
                return None
            buffer += received.get("body", b"")
            if len(buffer) > limit or not received.get("more_body", False):
                # Past the limit the caller answers 413 and closes the connection.
                return bytes(buffer)

    def _handshake(self, verdict: Verdict, message: dict[str, Any]) -> Answer:
        code, url = validation_fields(message)
        if self.manual_validation:
            if url is None:
                detail = "handshake without data.validationUrl (needed for manual validation)"
                return _reject(verdict, 400, "no_validation_url", detail)
            verdict.validation_url = url
            verdict.status = 200
            validator = self.validator
            if validator is None:
                verdict.detail = "answered without the code: validate by GET of the validationUrl"
                return Answer(200, b"{}")
            # Decided now; the GET itself runs on the validator's own thread, later.
            skipped = validator.schedule(url)
            if skipped is None:
                verdict.detail = "answered without the code; the validationUrl will be fetched"
            else:
                verdict.validation_skipped = skipped.reason
                verdict.detail = (
                    f"answered without the code; validationUrl not fetched: {skipped.detail}"
                )
            return Answer(200, b"{}")
        if code is None:
            return _reject(
                verdict, 400, "no_validation_code", "handshake without data.validationCode"
            )
        verdict.status = 200
        verdict.detail = "answered validationResponse"
        return Answer(200, orjson.dumps(build_reply(code)))

    async def _event(
        self, verdict: Verdict, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> Answer | None:
        """The answer a fault plan or the forwarded handler gives; None: reset the connection."""
        faults = self.faults
        action = faults.next() if faults is not None else None
        if action is not None:
            verdict.fault = action.label
            if action.delay:
                await self.clock.sleep(action.delay)
            if action.close:
                verdict.status = None
                verdict.detail = "connection reset (fault)"
                return None
            if action.status is not None:
                verdict.status = action.status
                return Answer(action.status, b"")
        forwarder = self.forwarder
        if forwarder is not None:
            answer = await forwarder.forward(headers, body)
            verdict.forward = answer.result
            verdict.status = answer.status
            return Answer(answer.status, answer.body, content_type=answer.content_type)
        verdict.status = 200
        return OK

    def _too_large(self, verdict: Verdict) -> Answer:
        verdict.status, verdict.reason = 413, "body_too_large"
        verdict.detail = f"body over the limit of {self.max_body_bytes} bytes"
        # Close the connection: the rest of the body is never read.
        return Answer(413, _error(verdict.reason, verdict.detail), close=True)


class Answer:
    """One answer of the receiver: status, headers and body.

    ``send`` writes it as ASGI messages; the receiver's HTTP protocol writes ``headers`` itself.
    """

    __slots__ = ("_body_message", "_start_message", "body", "close", "headers", "status")

    def __init__(
        self,
        status: int,
        body: bytes = b"",
        *,
        content_type: bytes | None = _JSON,
        extra: list[tuple[bytes, bytes]] | None = None,
        close: bool = False,
    ) -> None:
        headers = [(_CONTENT_LENGTH, str(len(body)).encode())]
        if body and content_type:
            headers.append((_CONTENT_TYPE, content_type))
        if close:
            headers.append((b"connection", b"close"))
        if extra:
            headers.extend(extra)
        self.status = status
        self.body = body
        self.headers = headers
        self.close = close
        self._start_message: Message = {
            "type": "http.response.start",
            "status": status,
            "headers": headers,
        }
        self._body_message: Message = {"type": "http.response.body", "body": body}

    async def send(self, send: Send) -> None:
        # uvicorn reads the messages and never mutates them, so a prebuilt answer serves many.
        await send(self._start_message)
        await send(self._body_message)


OK = Answer(200, b"")
"""The answer to an authentic event: 200 with an empty body."""
_HEALTHY = Answer(200, b'{"status":"ok"}')


def _reject(verdict: Verdict, status: int, reason: str, detail: str) -> Answer:
    verdict.status, verdict.reason, verdict.detail = status, reason, detail
    return Answer(status, _error(reason, detail))


def _describe_message(verdict: Verdict, body: bytes) -> None:
    """Best effort: fill in the event's fields for the display of a rejected request."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return
    if type(message) is dict:
        event_type, event_id = message.get("EventType"), message.get("EventId")
        verdict.event_type = event_type if type(event_type) is str else None
        verdict.event_id = event_id if type(event_id) is str else None
        verdict.profile_id = message.get("ProfileId")
        verdict.subscription_id = message.get("SubscriptionId")
        if message.get("EventType") == VALIDATION_EVENT_TYPE:
            verdict.kind = Kind.HANDSHAKE
        elif verdict.event_type:
            verdict.kind = Kind.EVENT


def _is_utf8(body: bytes) -> bool:
    # msgspec does not check the UTF-8 of the strings it skips; orjson refuses invalid UTF-8.
    try:
        body.decode()
    except UnicodeDecodeError:
        return False
    return True


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media in (_JSON, b"text/json") or media.endswith(b"+json")


def _json_type(value: object) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _error(reason: str, detail: str) -> bytes:
    return orjson.dumps({"error": reason, "detail": detail})


_LINGER_RESET = struct.pack("ii", 1, 0)


async def _reset(send: Send) -> None:
    """Drop the connection without an answer (a TCP reset where possible).

    ASGI has no message for this, so it reaches the transport through uvicorn's ``send``, a bound
    method of its request cycle (``send.__self__.transport``), which is not uvicorn's public
    interface. When that is not a transport (uvloop's are not ``asyncio.Transport`` instances:
    checked by their methods) (another uvicorn, a test calling the app
    directly), it answers ``500`` with ``Connection: close`` instead, which a sender retries as it
    would a reset, and says so once in the log.
    """
    transport: Any = getattr(getattr(send, "__self__", None), "transport", None)
    if not all(callable(getattr(transport, name, None)) for name in _TRANSPORT_METHODS):
        global _reset_unavailable_logged
        if not _reset_unavailable_logged:
            _reset_unavailable_logged = True
            _log.warning("connections cannot be reset here: the reset fault answers 500 instead")
        await _RESET_FALLBACK.send(send)
        return
    if transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            # linger 0: close() sends RST instead of a FIN after the unsent data
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        except OSError:
            pass
    transport.abort()
    # Let uvicorn see the disconnection before the app returns, so it does not answer 500.
    await asyncio.sleep(0)
    await asyncio.sleep(0)


_reset_unavailable_logged = False
_TRANSPORT_METHODS = ("abort", "is_closing", "get_extra_info")
_RESET_FALLBACK = Answer(500, b"", close=True)


async def _nothing() -> None:
    return None


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
