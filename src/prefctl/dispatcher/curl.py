"""``CurlTransport``: webhook POSTs through libcurl's multi interface (pycurl), on an asyncio loop.

When the transport was chosen, libcurl multi measured at 14.5k deliveries/s to nginx, aiohttp 3.3k, httpx 0.2k. This
drives curl's multi_socket API from the loop it is used on: the sockets curl wants watched go into
one epoll set whose own descriptor the loop watches (``loop.add_reader``), and curl's timer is one
``loop.call_at``. Measured here against nginx (50k requests, 64 in flight): 12–15k requests/s,
as fast as a dedicated thread looping on ``multi.perform`` and with no hand-over of results across
threads; one ``add_reader`` per socket plus a loop timer per curl timer change ran 3.6k/s.

How many transfers are inside curl at once: the engine sizes the transport for the sum of its
accounts' MaxConcurrentRequests (``size_for``), so that an account meets no limit below its own
setting, even with every request to one host; ``connection_cap`` fits that to the open-files
limit (raising the soft limit towards the hard one first). Within that cap, a host starts with
``HOST_START`` (64) transfers: libcurl slows down sharply when thousands of transfers wait inside
one multi handle (5,000 queued behind 64 connections: 3.5k/s), and a fast endpoint gains nothing
from thousands of connections, so the others wait here, per host, hosts taking turns. A host
whose transfers are all busy and that gave no answer for ``SLOW_HOST_SECONDS`` is slow: it gets
twice as many, again each time as long passes with no answer, up to the cap (until it has
nothing in flight). The time a request waits here is reported (``Response.waited``,
``wire_wait``): the response timeout counts from when it goes on the wire. A request still
waiting after its whole response timeout (only when the open-files limit caps the connections)
is given up unsent.

Requests are HTTP/1.1 POSTs over kept-alive connections: no redirects followed (a 3xx is reported
with its Location in ``error``), no proxy, only http and https, TLS verified (an account's extra CAs
added to the system's), an optional client certificate (mTLS), ``Expect:`` off. Response bodies
are read and discarded; a body over ``max_body_bytes`` ends the transfer (its status still counts).
"""

from __future__ import annotations

import asyncio
import math
import resource
import select
import selectors
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prefctl import __version__
from prefctl.dispatcher.transport import UNSENT_ERROR, Request, Response, TlsIdentity

__all__ = [
    "DEFAULT_IN_FLIGHT",
    "FD_RESERVE",
    "HOST_START",
    "MAX_BODY_BYTES",
    "SLOW_HOST_SECONDS",
    "CurlTransport",
    "connection_cap",
]

USER_AGENT = f"prefctl-dispatcher/{__version__}"
# Connections made room for until the engine sizes the transport (the spec's default
# MaxConcurrentRequests).
DEFAULT_IN_FLIGHT = 500
# Open files kept free for everything else of the process (the store, its journal, the servers of
# the emulator and their clients, logs).
FD_RESERVE = 256
MAX_BODY_BYTES = 64 * 1024
# Connections a host gets at first: a fast endpoint takes thousands of requests a second over them.
HOST_START = 64
# A host that gave no answer for this long while every connection it has is busy is slow: it gets
# twice as many, up to the cap, and again each time this passes with no answer. (Shorter, an
# endpoint as fast as nginx, paused with its process on a busy machine, was taken for slow, and
# thousands of connections slowed both sides.)
SLOW_HOST_SECONDS = 0.25
# libcurl's CURL_CSELECT_IN/OUT/ERR (curl/multi.h), kept here so that importing this module does
# not import pycurl.
_CSELECT_IN, _CSELECT_OUT, _CSELECT_ERR = 1, 2, 4


@dataclass(slots=True)
class _Queued:
    request: Request
    submitted: float  # time.monotonic() at send()


def connection_cap(wanted: int) -> int:
    """How many connections to hold for ``wanted`` requests at once: all of them, within the
    open-files limit less ``FD_RESERVE``. A soft limit too low is raised first, up to the hard
    limit (as a server does at start); where that is refused, the cap is what the limit leaves
    (at least half of it)."""
    wanted = max(1, wanted)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    need = wanted + FD_RESERVE
    if soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        if raised > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
                soft = raised
            except (ValueError, OSError):
                pass  # the limit stays as it is: the cap follows it
    return max(1, min(wanted, max(soft - FD_RESERVE, soft // 2)))


@lru_cache(maxsize=4096)
def _host_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@lru_cache(maxsize=1)
def _system_cas() -> bytes:
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_bytes()
    return b""


class _EpollPoller:
    """The sockets curl wants watched, in one epoll set: its descriptor is what the loop watches."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._watched: dict[int, int] = {}

    def fileno(self) -> int:
        return self._epoll.fileno()

    def watch(self, fd: int, read: bool, write: bool) -> None:
        mask = (select.EPOLLIN if read else 0) | (select.EPOLLOUT if write else 0)
        old = self._watched.get(fd)
        if old == mask:
            return
        try:
            (self._epoll.register if old is None else self._epoll.modify)(fd, mask)
        except FileNotFoundError:  # a closed socket's number, reused: the kernel forgot it
            self._epoll.register(fd, mask)
        except FileExistsError:
            self._epoll.modify(fd, mask)
        self._watched[fd] = mask

    def forget(self, fd: int) -> None:
        if self._watched.pop(fd, None) is not None:
            try:
                self._epoll.unregister(fd)
            except OSError:
                pass  # curl closed the socket first: the kernel already dropped it

    def ready(self) -> list[tuple[int, int]]:
        """(fd, curl CSELECT flags) of the sockets ready now."""
        out = []
        for fd, events in self._epoll.poll(0):
            flags = 0
            if events & select.EPOLLIN:
                flags |= _CSELECT_IN
            if events & select.EPOLLOUT:
                flags |= _CSELECT_OUT
            if events & (select.EPOLLERR | select.EPOLLHUP):
                flags |= _CSELECT_ERR
            out.append((fd, flags))
        return out

    def close(self) -> None:
        self._epoll.close()


class _SelectorPoller:
    """The same on platforms without epoll (kqueue on macOS)."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._watched: dict[int, int] = {}

    def fileno(self) -> int:
        fileno: Callable[[], int] = getattr(self._selector, "fileno")  # noqa: B009
        return fileno()

    def watch(self, fd: int, read: bool, write: bool) -> None:
        mask = (selectors.EVENT_READ if read else 0) | (selectors.EVENT_WRITE if write else 0)
        old = self._watched.get(fd)
        if old != mask:
            (self._selector.register if old is None else self._selector.modify)(fd, mask)
            self._watched[fd] = mask

    def forget(self, fd: int) -> None:
        if self._watched.pop(fd, None) is not None:
            try:
                self._selector.unregister(fd)
            except (OSError, KeyError, ValueError):
                pass

    def ready(self) -> list[tuple[int, int]]:
        # EVENT_READ and EVENT_WRITE are 1 and 2, as CSELECT_IN and CSELECT_OUT.
        return [(key.fd, events) for key, events in self._selector.select(0)]

    def close(self) -> None:
        self._selector.close()


class CurlTransport:
    """HTTP/1.1 POSTs through libcurl's multi interface, on the running asyncio loop.

    Create it anywhere; it binds to the loop of its first ``send``. ``size_for`` sets how many
    transfers are inside curl at once, to one host and in all (``connection_cap``; until then
    ``DEFAULT_IN_FLIGHT``); ``per_host`` and ``max_active`` fix either instead. The rest wait here,
    oldest first, hosts taking turns. ``max_body_bytes`` caps the response body read.
    """

    payloads = True  # real HTTP: every request carries its body and signature

    def __init__(
        self,
        *,
        per_host: int | None = None,
        max_active: int | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        import pycurl

        self._pycurl = pycurl
        self._fixed_per_host = per_host
        self._fixed_max_active = max_active
        self._per_host = self._max_active = 0
        self._max_body = max_body_bytes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._poller = _EpollPoller() if hasattr(select, "epoll") else _SelectorPoller()
        self._multi = pycurl.CurlMulti()
        self._multi.setopt(pycurl.M_SOCKETFUNCTION, self._on_socket)
        self._multi.setopt(pycurl.M_TIMERFUNCTION, self._on_timer)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._deadline: float | None = None
        self._idle: list[Any] = []
        self._active: dict[int, Any] = {}  # request key → curl handle
        self._queues: dict[str, deque[_Queued]] = {}
        self._turns: deque[str] = deque()  # hosts with queued requests and a free slot
        self._in_turns: set[str] = set()
        self._host_active: dict[str, int] = {}
        self._host_width: dict[str, int] = {}  # hosts found slow: their connections allowed
        self._quiet_since: dict[str, float] = {}  # busy hosts: their last answer, or start
        self._slow_check: asyncio.TimerHandle | None = None
        self._queued_keys: set[int] = set()
        self._cancelled: set[int] = set()
        self._answers: list[Response] = []
        self._closed = False
        self._size(DEFAULT_IN_FLIGHT)

    # -- Transport -----------------------------------------------------------------------------
    def send(self, requests: Sequence[Request]) -> None:
        if self._closed:
            raise RuntimeError("the transport is closed")
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self._poller.fileno(), self._on_ready)
        now = time.monotonic()
        for request in requests:
            host = _host_of(request.url)
            queue = self._queues.get(host)
            if queue is None:
                queue = self._queues[host] = deque()
            queue.append(_Queued(request, now))
            self._queued_keys.add(request.key)
            self._offer_turn(host)
        self._pump()
        self._watch_slow()

    def size_for(self, in_flight: int) -> None:
        if self._closed:
            return
        self._size(in_flight)
        for host in list(self._queues):
            self._offer_turn(host)  # a larger cap lets waiting requests go now
        if self._loop is not None:
            self._pump()

    def take(self) -> list[Response]:
        self._give_up_unsent()
        answers, self._answers = self._answers, []
        return answers

    def wire_wait(self, key: int) -> float | None:
        if key in self._queued_keys:
            return None
        handle = self._active.get(key)
        return 0.0 if handle is None else float(handle.waited)

    def cancel(self, keys: Iterable[int]) -> None:
        for key in keys:
            handle = self._active.get(key)
            if handle is not None:
                self._finish(handle)
            elif key in self._queued_keys:
                self._cancelled.add(key)  # dropped when its turn comes
        self._pump()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for handle in list(self._active.values()):
            self._multi.remove_handle(handle)
            handle.close()
        for handle in self._idle:
            handle.close()
        self._active.clear()
        self._idle.clear()
        self._queues.clear()
        for timer in (self._timer, self._slow_check):
            if timer is not None:
                timer.cancel()
        if self._loop is not None:
            self._loop.remove_reader(self._poller.fileno())
        self._multi.close()
        self._poller.close()

    # -- queueing ------------------------------------------------------------------------------
    def _size(self, in_flight: int) -> None:
        cap = connection_cap(in_flight)
        self._max_active = self._fixed_max_active or cap
        self._per_host = min(self._fixed_per_host or cap, self._max_active)
        # Connections kept alive between cycles: one per transfer allowed at once.
        self._multi.setopt(self._pycurl.M_MAXCONNECTS, self._max_active)

    def _give_up_unsent(self) -> None:
        """Answer the queued requests that waited their whole response timeout for a connection
        (a host that hangs keeps its slots): they will not be sent."""
        now = time.monotonic()
        for host in list(self._queues):
            queue = self._queues[host]
            while queue and now - queue[0].submitted >= queue[0].request.timeout:
                queued = queue.popleft()
                self._queued_keys.discard(queued.request.key)
                if queued.request.key in self._cancelled:
                    self._cancelled.discard(queued.request.key)
                else:
                    self._answers.append(
                        Response(queued.request.key, None, UNSENT_ERROR, now - queued.submitted)
                    )
            if not queue:
                del self._queues[host]

    def _width(self, host: str) -> int:
        """How many transfers ``host`` may have at once now: ``HOST_START`` (within the cap), or
        more while it is slow."""
        return self._host_width.get(host) or min(HOST_START, self._per_host)

    def _offer_turn(self, host: str) -> None:
        if (
            host not in self._in_turns
            and host in self._queues
            and self._host_active.get(host, 0) < self._width(host)
        ):
            self._turns.append(host)
            self._in_turns.add(host)

    def _pump(self) -> None:
        """Move queued requests into curl: each host in turn, as many as its free slots."""
        turns, active = self._turns, self._active
        now = time.monotonic()
        while turns and len(active) < self._max_active:
            host = turns.popleft()
            self._in_turns.discard(host)
            queue = self._queues.get(host)
            if queue is None:
                continue  # its requests were given up meanwhile
            free = min(
                self._width(host) - self._host_active.get(host, 0), self._max_active - len(active)
            )
            for _ in range(min(free, len(queue))):
                self._launch(host, queue.popleft(), now)
            if not queue:
                del self._queues[host]
            self._offer_turn(host)

    def _watch_slow(self) -> None:
        if self._slow_check is None and self._queues and self._loop is not None:
            self._slow_check = self._loop.call_later(SLOW_HOST_SECONDS, self._widen_slow_hosts)

    def _widen_slow_hosts(self) -> None:
        """Double the transfers of a slow host (up to the cap): one whose transfers are all busy
        and that gave no answer for ``SLOW_HOST_SECONDS`` (the loop runs the transport's socket
        callbacks before this timer, so answers that came meanwhile are counted first)."""
        self._slow_check = None
        if self._closed:
            return
        now = time.monotonic()
        for host in list(self._queues):
            busy = self._host_active.get(host, 0)
            quiet = now - self._quiet_since.get(host, now)
            width = self._width(host)
            if busy >= width and quiet >= SLOW_HOST_SECONDS and width < self._per_host:
                self._host_width[host] = min(self._per_host, 2 * width)
                self._quiet_since[host] = now  # the next doubling after as long again
                self._offer_turn(host)
        self._pump()
        self._watch_slow()

    def _launch(self, host: str, queued: _Queued, now: float) -> None:
        request = queued.request
        self._queued_keys.discard(request.key)
        if request.key in self._cancelled:
            self._cancelled.discard(request.key)
            return
        pycurl = self._pycurl
        waited = now - queued.submitted
        if waited >= request.timeout:
            self._answers.append(Response(request.key, None, UNSENT_ERROR, waited))
            return
        handle = self._idle.pop() if self._idle else self._new_handle()
        if handle.url != request.url:
            handle.setopt(pycurl.URL, request.url)
            handle.url = request.url
        if handle.tls is not request.tls:
            self._apply_tls(handle, request.tls)
        handle.setopt(pycurl.POSTFIELDS, request.body)
        headers = ["Content-Type: application/json", "Expect:"]
        if request.signature is not None:
            headers.append("Service-Webhook: " + request.signature)
        handle.setopt(pycurl.HTTPHEADER, headers)
        # The response timeout and the late window count from here, on the wire: the wait for a
        # connection is the dispatcher's own queueing, not the endpoint's slowness.
        handle.setopt(pycurl.TIMEOUT_MS, max(1, math.ceil(request.keep_open * 1000)))
        handle.queued = queued
        handle.waited = waited
        handle.host = host
        handle.received = 0
        busy = self._host_active.get(host, 0)
        if not busy:
            self._quiet_since[host] = now
        self._host_active[host] = busy + 1
        self._active[request.key] = handle
        self._multi.add_handle(handle)

    def _new_handle(self) -> Any:
        pycurl = self._pycurl
        handle = pycurl.Curl()
        handle.setopt(pycurl.NOSIGNAL, 1)
        handle.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        handle.setopt(pycurl.FOLLOWLOCATION, 0)
        handle.setopt(pycurl.PROXY, "")
        handle.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
        handle.setopt(pycurl.SSL_VERIFYPEER, 1)
        handle.setopt(pycurl.SSL_VERIFYHOST, 2)
        handle.setopt(pycurl.USERAGENT, USER_AGENT)
        cap = self._max_body

        def discard(chunk: bytes) -> int | None:
            handle.received += len(chunk)
            return 0 if handle.received > cap else None  # 0 ends the transfer

        handle.setopt(pycurl.WRITEFUNCTION, discard)
        handle.url = None
        handle.tls = None
        return handle

    def _apply_tls(self, handle: Any, tls: TlsIdentity | None) -> None:
        pycurl = self._pycurl
        if tls is not None and tls.ca_pem:
            handle.setopt(pycurl.CAINFO_BLOB, tls.ca_pem + b"\n" + _system_cas())
        else:
            handle.unsetopt(pycurl.CAINFO_BLOB)
        if tls is not None and tls.client_cert_pem and tls.client_key_pem:
            handle.setopt(pycurl.SSLCERT_BLOB, tls.client_cert_pem)
            handle.setopt(pycurl.SSLCERTTYPE, "PEM")
            handle.setopt(pycurl.SSLKEY_BLOB, tls.client_key_pem)
            handle.setopt(pycurl.SSLKEYTYPE, "PEM")
        else:
            handle.unsetopt(pycurl.SSLCERT_BLOB)
            handle.unsetopt(pycurl.SSLKEY_BLOB)
        handle.tls = tls

    def _finish(self, handle: Any) -> None:
        """Take a transfer out of curl and give its slot to the next request."""
        self._multi.remove_handle(handle)
        queued: _Queued = handle.queued
        handle.queued = None
        del self._active[queued.request.key]
        host = handle.host
        self._host_active[host] -= 1
        if self._host_active[host]:
            self._quiet_since[host] = time.monotonic()
        else:  # idle: quiet counts again from its next request, which starts narrow again
            self._quiet_since.pop(host, None)
            self._host_width.pop(host, None)
        if len(self._idle) < self._max_active:
            self._idle.append(handle)
        else:
            handle.close()
        self._offer_turn(host)

    # -- curl's callbacks and the loop's ---------------------------------------------------------
    def _on_socket(self, what: int, fd: int, _multi: Any, _data: Any) -> None:
        pycurl = self._pycurl
        if what == pycurl.POLL_REMOVE:
            self._poller.forget(fd)
        else:
            self._poller.watch(
                fd, what in (pycurl.POLL_IN, pycurl.POLL_INOUT), what != pycurl.POLL_IN
            )

    def _on_timer(self, milliseconds: int) -> None:
        # curl moves its timer on almost every call; one loop timer is re-armed only when the
        # deadline comes earlier, and re-checks the deadline when it fires.
        loop = self._loop
        if milliseconds < 0 or loop is None:
            self._deadline = None
            return
        self._deadline = loop.time() + milliseconds / 1000
        if self._timer is None or self._deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = self._deadline
            self._timer = loop.call_at(self._deadline, self._on_timer_due)

    def _on_timer_due(self) -> None:
        self._timer = None
        deadline, loop = self._deadline, self._loop
        if deadline is None or loop is None or self._closed:
            return
        if deadline > loop.time() + 0.0005:
            self._timer_at = deadline
            self._timer = loop.call_at(deadline, self._on_timer_due)
            return
        self._deadline = None
        self._multi.socket_action(self._pycurl.SOCKET_TIMEOUT, 0)
        self._collect()

    def _on_ready(self) -> None:
        multi = self._multi
        for fd, flags in self._poller.ready():
            multi.socket_action(fd, flags)
        self._collect()

    def _collect(self) -> None:
        pycurl = self._pycurl
        multi = self._multi
        now = time.monotonic()
        while True:
            remaining, succeeded, failed = multi.info_read()
            for handle in succeeded:
                self._report(handle, handle.getinfo(pycurl.RESPONSE_CODE), None, now)
            for handle, code, message in failed:
                status = handle.getinfo(pycurl.RESPONSE_CODE) or None
                if code == pycurl.E_WRITE_ERROR and status is not None:
                    self._report(handle, status, None, now)  # the body was cut at the cap
                else:
                    self._report(handle, None, message or f"curl error {code}", now)
            if not remaining:
                break
        self._pump()
        self._watch_slow()

    def _report(self, handle: Any, status: int | None, error: str | None, now: float) -> None:
        queued: _Queued = handle.queued
        if status is not None and 300 <= status < 400:
            location = handle.getinfo(self._pycurl.REDIRECT_URL)
            error = f"redirect to {location} not followed" if location else "redirect not followed"
        elapsed = now - queued.submitted
        self._answers.append(Response(queued.request.key, status, error, elapsed, handle.waited))
        self._finish(handle)
