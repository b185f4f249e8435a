"""prefctl's server event loop accepts a burst of new connections at once (server_loop)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import ClassVar

import pytest

from prefctl.receiver.serve import bind_socket
from prefctl.servers.loop import GreedyListener, new_event_loop

BURST = 40


class Counting(asyncio.Protocol):
    made: ClassVar[list[asyncio.BaseTransport]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Counting.made.append(transport)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = new_event_loop()
    yield loop
    loop.close()


def test_listener_accepts_a_burst_of_connections_in_one_iteration(
    loop: asyncio.AbstractEventLoop,
) -> None:
    sock = bind_socket("127.0.0.1", 0)
    Counting.made = []
    server = loop.run_until_complete(loop.create_server(Counting, sock=sock))
    assert isinstance(server, GreedyListener)
    # The kernel completes the handshakes; the server has not accepted anything yet.
    clients = [socket.create_connection(sock.getsockname()) for _ in range(BURST)]
    try:
        # libuv alone takes one connection per loop iteration: about a dozen of 40 after these.
        for _ in range(3):  # the behaviour under test: what three loop iterations accept
            loop.run_until_complete(asyncio.sleep(0))
        assert len(Counting.made) == BURST
    finally:
        for client in clients:
            client.close()
        for transport in Counting.made:
            transport.close()
        server.close()
        loop.run_until_complete(server.wait_closed())
        sock.close()
        assert not server.is_serving()


def test_loop_without_a_socket_creates_uvloops_own_server(
    loop: asyncio.AbstractEventLoop,
) -> None:
    server = loop.run_until_complete(loop.create_server(Counting, "127.0.0.1", 0))
    try:
        assert not isinstance(server, GreedyListener)
        assert server.sockets
    finally:
        server.close()
        loop.run_until_complete(server.wait_closed())
