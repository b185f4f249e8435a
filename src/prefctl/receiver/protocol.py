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

It relies on uvicorn's ``HttpToolsProtocol`` (its parser callbacks, per-connection state and
``STATUS_LINE``), which are not uvicorn's public interface. So ``webhook_protocol`` first checks
them: the uvicorn version is in the tested range (``servers.seams``), the methods it overrides take
the arguments it passes, and a probe request fed through the protocol on a stand-in transport gets
exactly the bytes the app's decisions make. If anything is missing, differs or raises, the receiver
serves every request through uvicorn's own protocol and the ASGI app (``guarded_protocol``): the
same answers, slower. An exception from uvicorn's internals while serving switches to that path
for the requests that follow (the request at hand goes to the ASGI app). ``-v`` logs which path
is in use; tests/receiver/test_protocol.py holds the two paths equal.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from prefctl.clock import SystemClock
from prefctl.receiver.app import OK, Answer, ReceiverApp
from prefctl.receiver.verdict import Verdict
from prefctl.servers.connections import ConnectionRegistry, guard_class, guarded_protocol
from prefctl.servers.seams import PROTOCOL_METHODS, httptools_protocol, seam_problem

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
_PROBE_REQUEST = (
    b"POST /webhooks HTTP/1.1\r\nhost: probe\r\ncontent-type: application/json\r\n"
    b"content-length: 2\r\n\r\n{}"
)


def webhook_protocol(
    app: ReceiverApp, registry: ConnectionRegistry
) -> type[asyncio.Protocol] | str:
    """The uvicorn ``http`` protocol for ``app``: the one that answers the webhook path in place
    when uvicorn's internals pass the start-up check, else ``connections.guarded_protocol(registry)``."""
    base = httptools_protocol()
    problem = seam_problem(base, PROTOCOL_METHODS)
    if problem is None:
        assert base is not None
        try:
            from uvicorn.protocols.http.httptools_impl import STATUS_LINE

            fast = _webhook_class(base, dict(STATUS_LINE))
            cls = guard_class(fast)
            attributes = {"receiver": app, "webhook_url": app.path.encode(), "registry": registry}
            protocol: type[asyncio.Protocol] = type("WebhookProtocol", (cls,), attributes)
            problem = _probe(protocol, registry)
        except Exception as exc:  # anything at all: the fallback serves the same answers
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            _log.info("webhook requests are answered in uvicorn's protocol (the fast path)")
            return protocol
    _log.info("webhook requests go through the ASGI app (the fallback path): %s", problem)
    return guarded_protocol(registry)


class _ProbeTransport(asyncio.Transport):
    """A transport that keeps what is written to it (the start-up probe)."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in ("sockname", "peername"):
            return ("127.0.0.1", 0)
        return default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _probe(protocol: type[asyncio.Protocol], registry: ConnectionRegistry) -> str | None:
    """Feed one webhook request through ``protocol`` on a stand-in transport; why its answer
    differs from the app's own decisions, or None when it is exactly those bytes."""
    import uvicorn
    from uvicorn.server import ServerState

    verdicts: list[Verdict] = []
    app = ReceiverApp(push=verdicts.append, clock=SystemClock())
    expected_verdict, signature, _ = app.begin([(b"content-type", b"application/json")])
    expected = app.finish(expected_verdict, signature, b"{}")
    assert expected is not None
    attributes = {"receiver": app, "registry": registry, "probing": True}
    probe_class: type[Any] = type("Probe", (protocol,), attributes)
    config = uvicorn.Config(
        app, http=probe_class, interface="asgi3", lifespan="off", log_config=None
    )
    config.load()
    state = ServerState()
    probe = probe_class(config=config, server_state=state, app_state={})
    transport = _ProbeTransport()
    probe.connection_made(transport)
    try:
        probe.data_received(_PROBE_REQUEST)
    finally:
        probe.connection_lost(None)
    if not probe_class.fast:
        return str(probe_class.failure)
    if bytes(transport.written) != _wire(probe.status_lines, expected, keep_alive=True):
        return "a probe request was not answered as the app decides"
    if len(verdicts) != 1 or state.total_requests != 1:
        return "a probe request was not counted as uvicorn counts requests"
    return None


def _wire(status_lines: dict[int, bytes], answer: Answer, keep_alive: bool) -> bytes:
    """``answer`` as uvicorn writes it (status line, lower-case headers, body)."""
    lines = [status_lines[answer.status]]
    for name, value in answer.headers:
        lines += (name, b": ", value, b"\r\n")
    if not keep_alive and not answer.close:
        lines.append(_CLOSE)
    lines += (b"\r\n", answer.body)
    return b"".join(lines)


def _webhook_class(base: type[Any], status_lines: dict[int, bytes]) -> type[Any]:
    """``WebhookProtocol`` on uvicorn's httptools protocol ``base``."""
    ok_keep_alive = _wire(status_lines, OK, keep_alive=True)

    class WebhookProtocol(base):  # type: ignore[misc]
        """One HTTP connection; see the module docstring. Use ``webhook_protocol(app)``."""

        receiver: ReceiverApp
        webhook_url: bytes
        fast = True  # False once uvicorn's internals raised: every request goes to the ASGI app
        failure = ""  # what uvicorn's internals raised
        probing = False  # the start-up probe's class: its failure is reported, not logged

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.status_lines = status_lines
            self._state = _ASGI
            self._verdict: Verdict | None = None
            self._signature: bytes | None = None
            self._body: bytes | bytearray = b""
            self._keep_alive = True
            self._closing = False  # shut down while a request was being read: close once answered
            # Keep-alive after answers given here: uvicorn arms a timer per answer and cancels it
            # when data arrives (1.7 µs a request); here one timer per connection checks the time
            # of the last answer (None: data arrived since) and closes the connection once it is
            # idle for the same ``timeout_keep_alive``.
            self._idle_since: float | None = None
            self._idle_timer: asyncio.TimerHandle | None = None
            self._begun = False  # the request went to uvicorn from its first byte (not fast)

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
            if not self.fast:
                self._state = _ASGI
                super().on_message_begin()
                self._begun = True
                return
            # uvicorn builds the request's ASGI scope here; it is built only for requests that
            # go to the ASGI app (``_to_asgi``).
            self._begun = False
            self.url = b""
            self.expect_100_continue = False
            self.headers: list[tuple[bytes, bytes]] = []

        def on_headers_complete(self) -> None:
            if self._begun:
                super().on_headers_complete()
                return
            receiver = self.receiver
            if self.transport.is_closing():
                # Pipelined behind an answer that closed the connection: nobody reads an answer.
                self._state = _ANSWERED
                return
            try:
                parser = self.parser
                cycle = self.cycle
                to_asgi = (
                    self.url != self.webhook_url
                    or parser.get_method() != b"POST"
                    or self.expect_100_continue
                    or not receiver.synchronous
                    or (cycle is not None and not cycle.response_complete)  # answers in order
                    or self.flow.write_paused
                    or parser.should_upgrade()
                    or self.limit_concurrency is not None
                )
                if not to_asgi:
                    self._keep_alive = (
                        parser.get_http_version() != "1.0" and parser.should_keep_alive()
                    )
            except Exception as exc:
                self._disable(exc)
                to_asgi = True
            if to_asgi:
                self._to_asgi()
                return
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
                transport.write(ok_keep_alive)
            else:
                transport.write(_wire(status_lines, answer, keep_alive))
            self.receiver.push(verdict)
            try:
                self.server_state.total_requests += 1
                if keep_alive:
                    loop = self.loop
                    self._idle_since = loop.time()
                    if self._idle_timer is None:
                        self._idle_timer = loop.call_later(
                            self.timeout_keep_alive, self._check_idle
                        )
            except Exception as exc:
                self._disable(exc)
                keep_alive = False
            if not keep_alive:
                transport.close()

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
            """A bug in the receiver's decisions: answer 500 and close, as uvicorn does for the
            app."""
            _log.exception("the receiver failed to answer a webhook request")
            self._state = _ANSWERED
            self._verdict = None
            self.transport.write(_INTERNAL_ERROR)
            self.transport.close()

        def _disable(self, exc: Exception) -> None:
            cls = type(self)
            if cls.fast:
                cls.fast = False
                cls.failure = f"{type(exc).__name__}: {exc}"
                if cls.probing:
                    return
                _log.warning(
                    "webhook requests now go through the ASGI app (the fallback path): "
                    "uvicorn's internals raised %s: %s",
                    type(exc).__name__,
                    exc,
                )

        # Connection events.

        def shutdown(self) -> None:
            if self._state == _READING:
                self._closing = True  # answer the request being read, then close
                return
            super().shutdown()

    return WebhookProtocol
