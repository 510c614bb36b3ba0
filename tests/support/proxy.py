"""A TCP proxy for outage tests: it forwards to a server until told to cut every
connection and refuse new ones, then to listen again on the same port; or until
told to hold: then it stops forwarding without closing anything, as a network
that drops packets (no RST, no FIN) does, until it is told to go on."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_CHUNK = 64 * 1024


class TcpProxy:
    """Runs on an event loop of its own thread; `cut()` and `restore()` return once done."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections_made = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.WriteTransport] = set()
        self._flowing = asyncio.Event()  # cleared while holding; used on the proxy's loop only
        self._flowing.set()

    def start(self) -> None:
        self._thread.start()
        self._call(self._listen())

    def cut(self) -> None:
        """Stop listening (new connections are refused) and reset every open connection,
        as a database server that has gone away does."""
        self._call(self._cut())

    def restore(self) -> None:
        """Listen again on the same port."""
        self._call(self._listen())

    def hold(self) -> None:
        """Stop forwarding, in both directions and for new connections, closing nothing:
        the kernel still accepts and acknowledges, so neither side sees an error."""
        self._call(self._set_flowing(False))

    def go_on(self) -> None:
        """Forward again, what was held first."""
        self._call(self._set_flowing(True))

    def close(self) -> None:
        self._call(self._cut())
        self._call(self._end_forwarding())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _call(self, coroutine) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._forward, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set_flowing(self, flowing: bool) -> None:
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _end_forwarding(self) -> None:
        """End every forwarder still running (one held, say)."""
        forwarders = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in forwarders:
            task.cancel()
        await asyncio.gather(*forwarders, return_exceptions=True)

    async def _cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()  # no new connections
        for transport in list(self._transports):
            transport.abort()  # RST, not FIN: the peer learns at once
        self._transports.clear()
        if server is not None:
            await server.wait_closed()  # from Python 3.12: until every connection ended

    async def _forward(self, client_reader, client_writer) -> None:
        if self._server is None:  # accepted just before the cut
            client_writer.transport.abort()
            return
        self._transports.add(client_writer.transport)
        await self._flowing.wait()  # a new connection goes nowhere while holding
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self._transports.discard(client_writer.transport)
            client_writer.transport.abort()
            return
        if self._server is None:  # cut while connecting upstream
            client_writer.transport.abort()
            server_writer.transport.abort()
            return
        self.connections_made += 1
        pair = (client_writer.transport, server_writer.transport)
        self._transports.update(pair)
        await asyncio.gather(
            _pump(client_reader, server_writer, self._flowing),
            _pump(server_reader, client_writer, self._flowing),
        )
        for transport in pair:
            self._transports.discard(transport)
            transport.abort()


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flowing: asyncio.Event
) -> None:
    try:
        while data := await reader.read(_CHUNK):
            await flowing.wait()
            writer.write(data)
            await writer.drain()
        await flowing.wait()  # a FIN is held too
        writer.write_eof()
    except (OSError, RuntimeError):
        pass  # the other side is gone; the caller aborts both


@contextmanager
def tcp_proxy(target_host: str, target_port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


def refuses_connections(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0
