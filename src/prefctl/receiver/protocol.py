"""The receiver's HTTP protocol: uvicorn's httptools protocol, with the webhook path answered in place.

For every request uvicorn builds an ASGI scope, a request-response cycle with its event, a task
to run the app, and two response messages to check and encode; for a webhook delivery that is
more work than the receiver's own decisions. ``WebhookProtocol`` answers a ``POST`` to the webhook
path right where the parser delivers it: ``ReceiverApp.begin`` when the headers are complete,
``ReceiverApp.finish`` when the body is, and the answer's bytes written to the transport, as
uvicorn would write them. The decisions are the app's (one place); only the HTTP plumbing is
here. Every other request — other paths and methods, ``Expect: 100-continue``, a request
pipelined behind one still being answered, a client not reading its answers, and every event
when a fault plan or ``--forward-to`` decides the answer (they wait) — goes to the ASGI app
through uvicorn exactly as before.

It relies on uvicorn's ``HttpToolsProtocol`` (its parser callbacks and per-connection state),
which the receiver's tests exercise over real connections on every run.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from prefctl.receiver.app import OK, Answer, ReceiverApp
from prefctl.receiver.verdict import Verdict

__all__ = ["webhook_protocol"]

_log = logging.getLogger("prefctl.receiver")

# What the request being parsed is, for this protocol.
_ASGI = 0  # uvicorn and the ASGI app handle it
_READING = 1  # a webhook request answered here, its body still arriving
_ANSWERED = 2  # answered here (from its headers or a body over the limit); the rest is ignored

_CLOSE = b"connection: close\r\n"
_INTERNAL_ERROR = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error"
)


def wire(answer: Answer, keep_alive: bool) -> bytes:
    """``answer`` as uvicorn writes it (status line, lower-case headers, body)."""
    lines = [STATUS_LINE[answer.status]]
    for name, value in answer.headers:
        lines += (name, b": ", value, b"\r\n")
    if not keep_alive and not answer.close:
        lines.append(_CLOSE)
    lines += (b"\r\n", answer.body)
    return b"".join(lines)


_OK_KEEP_ALIVE = wire(OK, keep_alive=True)


def webhook_protocol(app: ReceiverApp) -> type[asyncio.Protocol]:
    """The uvicorn ``http`` protocol class that answers ``app``'s webhook path in place."""
    attributes = {"receiver": app, "webhook_url": app.path.encode()}
    return type("WebhookProtocol", (WebhookProtocol,), attributes)


class WebhookProtocol(HttpToolsProtocol):  # type: ignore[misc]
    """One HTTP connection; see the module docstring. Use ``webhook_protocol(app)``."""

    receiver: ReceiverApp
    webhook_url: bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._state = _ASGI
        self._verdict: Verdict | None = None
        self._signature: bytes | None = None
        self._body: bytes | bytearray = b""
        self._keep_alive = True
        self._closing = False  # shut down while a request was being read: close once answered
        # Keep-alive after answers given here: uvicorn arms a timer per answer and cancels it
        # when data arrives (1.7 µs a request); here one timer per connection checks the time of
        # the last answer (None: data arrived since) and closes the connection once it is idle
        # for the same ``timeout_keep_alive``.
        self._idle_since: float | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        self._idle_since = None
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        super().connection_lost(exc)

    # Parser callbacks (httptools calls them while data_received feeds it).

    def on_message_begin(self) -> None:
        # uvicorn builds the request's ASGI scope here; it is built only for requests that go
        # to the ASGI app (``_to_asgi``).
        self.url = b""
        self.expect_100_continue = False
        self.headers = []

    def on_headers_complete(self) -> None:
        parser = self.parser
        receiver = self.receiver
        cycle = self.cycle
        if self.transport.is_closing():
            # Pipelined behind an answer that closed the connection: nobody reads an answer.
            self._state = _ANSWERED
            return
        if (
            self.url != self.webhook_url
            or parser.get_method() != b"POST"
            or self.expect_100_continue
            or not receiver.synchronous
            or (cycle is not None and not cycle.response_complete)  # answers go out in order
            or self.flow.write_paused
            or parser.should_upgrade()
            or self.limit_concurrency is not None
        ):
            self._to_asgi()
            return
        self._keep_alive = parser.get_http_version() != "1.0" and parser.should_keep_alive()
        self._state = _READING
        self._body = b""
        try:
            verdict, self._signature, answer = receiver.begin(self.headers)
        except Exception:
            self._fail()
            return
        self._verdict = verdict
        if answer is not None:
            self._answer(verdict, answer)

    def _to_asgi(self) -> None:
        self._state = _ASGI
        url, headers, expect_100_continue = self.url, self.headers, self.expect_100_continue
        super().on_message_begin()  # the scope, as uvicorn builds it
        self.url, self.headers, self.expect_100_continue = url, headers, expect_100_continue
        self.scope["headers"] = headers
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        state = self._state
        if state == _ASGI:
            super().on_body(body)
        elif state == _READING:
            if self._body:
                if type(self._body) is bytes:
                    self._body = bytearray(self._body)
                self._body += body
            else:
                self._body = body
            if len(self._body) > self.receiver.max_body_bytes:
                self._complete()  # answered 413, and the connection closed

    def on_message_complete(self) -> None:
        state = self._state
        if state == _ASGI:
            super().on_message_complete()
        elif state == _READING:
            self._complete()

    # Answering.

    def _complete(self) -> None:
        verdict = self._verdict
        assert verdict is not None
        body = self._body
        self._body = b""
        try:
            answer = self.receiver.finish(verdict, self._signature, bytes(body))
        except Exception:
            self._fail()
            return
        # ``receiver.synchronous`` was checked when the request began: finish() answers it.
        assert answer is not None
        self._answer(verdict, answer)

    def _answer(self, verdict: Verdict, answer: Answer) -> None:
        self._state = _ANSWERED
        self._verdict = None
        keep_alive = self._keep_alive and not answer.close and not self._closing
        transport = self.transport
        if answer is OK and keep_alive:
            transport.write(_OK_KEEP_ALIVE)
        else:
            transport.write(wire(answer, keep_alive))
        self.server_state.total_requests += 1
        self.receiver.push(verdict)
        if not keep_alive:
            transport.close()
            return
        self._idle_since = self.loop.time()
        if self._idle_timer is None:
            self._idle_timer = self.loop.call_later(self.timeout_keep_alive, self._check_idle)

    def _check_idle(self) -> None:
        self._idle_timer = None
        since = self._idle_since
        if since is None:
            return  # a request arrived since the last answer; its answer re-arms the timer
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._idle_timer = self.loop.call_later(left, self._check_idle)
        elif not self.transport.is_closing():
            self.transport.close()

    def _fail(self) -> None:
        """A bug in the receiver's decisions: answer 500 and close, as uvicorn does for the app."""
        _log.exception("the receiver failed to answer a webhook request")
        self._state = _ANSWERED
        self._verdict = None
        self.transport.write(_INTERNAL_ERROR)
        self.transport.close()

    # Connection events.

    def shutdown(self) -> None:
        if self._state == _READING:
            self._closing = True  # answer the request being read, then close
            return
        super().shutdown()
