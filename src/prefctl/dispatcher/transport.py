"""The dispatcher's HTTP seam: ``Transport``, the requests and answers that cross it, and a model.

The engine hands a transport batches of ``Request``s and, at each cycle, takes the ``Response``s
that came back. Nothing here knows the delivery rules: a transport sends, waits at most
``Request.keep_open`` seconds, and reports the status or the error with the time it took
(``elapsed``). The engine decides what a slow or late answer means, so a transport can be real
(``prefctl.dispatcher.curl.CurlTransport``, libcurl's multi interface) or a model
(``FunctionTransport``: the simulator's endpoint, tests).

    transport = CurlTransport()
    transport.send([Request(key=1, url=url, body=body, signature=header, timeout=30.0,
                            keep_open=180.0)])
    ...                                  # later, on the same event loop
    for response in transport.take():
        response.key, response.status, response.error, response.elapsed
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "UNSENT_ERROR",
    "FunctionTransport",
    "Reply",
    "Request",
    "Response",
    "TlsIdentity",
    "Transport",
]

# The error of a request that was never sent: no free connection to its host within the response
# timeout (a transport that queues requests per host reports it; the attempt is ``timed_out``).
UNSENT_ERROR = "not sent: no free connection to the host within the response timeout"


@dataclass(frozen=True, slots=True)
class TlsIdentity:
    """An account's TLS settings for deliveries (PEM): the client certificate and key presented
    for mTLS, and extra CAs trusted besides the system's."""

    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = field(default=None, repr=False)
    ca_pem: bytes | None = None


@dataclass(slots=True)
class Request:
    """One POST. ``signature`` is the ``Service-Webhook`` header value (None: no header, as for
    a handshake). A request that could not even start within ``timeout`` seconds (the response
    timeout: no free connection) is given up unsent; once on the wire it is kept open for an
    answer up to ``keep_open`` seconds (the late-success window)."""

    key: int
    url: str
    body: bytes
    signature: str | None
    timeout: float
    keep_open: float
    tls: TlsIdentity | None = None


@dataclass(slots=True)
class Response:
    """How a request ended: an HTTP ``status``, or ``status`` None and an ``error`` (connection
    refused or reset, TLS failure, no answer within ``keep_open``). ``elapsed`` is the seconds
    from ``send`` to the answer; an answer "arrives" at send time + ``elapsed``. ``waited`` is
    the part of it the request spent waiting for a free connection, before it went on the wire:
    the endpoint answered in ``elapsed - waited``."""

    key: int
    status: int | None
    error: str | None
    elapsed: float
    waited: float = 0.0


class Transport(Protocol):
    """What the engine needs from HTTP. All methods are called from one event loop."""

    # Whether requests need their body and signature; False for a model that answers without
    # reading them (the simulator's), for which the engine builds neither.
    payloads: bool

    def send(self, requests: Sequence[Request]) -> None:
        """Start the requests; their answers come back through ``take``."""
        ...

    def take(self) -> list[Response]:
        """The answers that came back since the last call (never blocks)."""
        ...

    def cancel(self, keys: Iterable[int]) -> None:
        """Give up on requests: no answer will be reported for them."""
        ...

    def size_for(self, in_flight: int) -> None:
        """Make room for up to ``in_flight`` requests at once, all to one host if need be (the
        engine's ceiling: the sum of its accounts' MaxConcurrentRequests)."""
        ...

    def wire_wait(self, key: int) -> float | None:
        """How long request ``key`` waited for a free connection before it went on the wire
        (0.0: at once, or not known any more); None while it is still waiting."""
        ...

    async def aclose(self) -> None:
        """Cancel everything and release connections."""
        ...


# -- a model transport -----------------------------------------------------------------------------
# Not frozen: made once per delivery on the dispatcher's hot path, where a frozen dataclass's
# __init__ (object.__setattr__ per field) cost ~5x a plain one. Treat it as immutable.
@dataclass(slots=True)
class Reply:
    """A modelled answer: a status or an error after ``elapsed`` seconds (``math.inf``: never)."""

    status: int | None = 200
    error: str | None = None
    elapsed: float = 0.0


class FunctionTransport:
    """Answers each request by calling ``answer(request)`` (an endpoint model: the simulator,
    tests). Answers are reported at once with their modelled ``elapsed``; the engine holds them
    until its clock reaches send time + ``elapsed``. ``sent`` keeps every request, in order.
    ``payloads=False``: ``answer`` reads neither body nor signature, so requests carry neither
    (``b""`` and None)."""

    def __init__(self, answer: Callable[[Request], Reply], *, payloads: bool = True) -> None:
        self.payloads = payloads
        self._answer = answer
        self._answers: list[Response] = []
        self.sent: list[Request] = []

    def send(self, requests: Sequence[Request]) -> None:
        for request in requests:
            self.sent.append(request)
            reply = self._answer(request)
            if math.isinf(reply.elapsed) or reply.elapsed > request.keep_open:
                continue  # no answer within keep_open: the engine gives up on its own
            self._answers.append(Response(request.key, reply.status, reply.error, reply.elapsed))

    def take(self) -> list[Response]:
        answers, self._answers = self._answers, []
        return answers

    def cancel(self, keys: Iterable[int]) -> None:
        gone = set(keys)
        self._answers = [a for a in self._answers if a.key not in gone]

    def size_for(self, in_flight: int) -> None:
        pass  # a model has no connections to size

    def wire_wait(self, key: int) -> float | None:
        return 0.0  # a model has no connections to wait for

    async def aclose(self) -> None:
        self._answers = []
