"""Keep-alive HTTP/1.1 connections: an asyncio Protocol per socket and a pool of idle ones.

A connection carries one exchange at a time (no pipelining). Reads are stamped first and parsed
second: ``data_received`` only takes the time and queues ``(exchange, bytes, t)`` in the pool's
:class:`Inbox`, which parses everything that arrived in one event-loop iteration in a single callback
right after. So when 256 streams deliver tokens in the same iteration, the last one's timestamp does
not include the time spent parsing the 255 before it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Protocol

from servelab.transport._wire import Endpoint


class Exchange(Protocol):
    def data(self, data: bytes, t: int) -> None: ...

    def lost(self, exc: Exception | None) -> None: ...


class Inbox:
    """Reads stamped on arrival, parsed together at the end of the loop iteration."""

    __slots__ = ("_items", "_scheduled", "_now")

    def __init__(self, now: Callable[[], int]) -> None:
        self._items: list[tuple[Exchange, bytes, int]] = []
        self._scheduled = False
        self._now = now

    def put(self, ex: Exchange, data: bytes) -> None:
        self._items.append((ex, data, self._now()))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Parse everything queued (also called before a timeout or a close is judged)."""
        self._scheduled = False
        items = self._items
        if items:
            self._items = []
            for ex, data, t in items:
                ex.data(data, t)


class Conn(asyncio.Protocol):
    """One TCP (or TLS) connection."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.closed = False
        self.reused = 0  # exchanges completed on this connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        if ex is not None:
            self.pool.inbox.put(ex, data)
        else:  # bytes nobody asked for (a server talking out of turn): this socket is unusable
            self.close()
            self.pool._forget(self)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.inbox.flush()  # bytes that came before the close are parsed before it is judged
        self.closed = True
        self.pool._forget(self)
        ex, self.exchange = self.exchange, None
        if ex is not None:
            ex.lost(exc)

    def write(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[union-attr]

    def writelines(self, parts: tuple[bytes, ...]) -> None:
        """Send ``parts`` in order without joining them first (a 300 KB body is not copied behind its
        head: uvloop hands the buffers to one writev)."""
        self.transport.writelines(parts)  # type: ignore[union-attr]

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def done(self, keep_alive: bool) -> None:
        """The exchange is over: back to the pool if the socket can carry another one, else close."""
        self.exchange = None
        if keep_alive and not self.closed:
            self.reused += 1
            self.pool._release(self)
        else:
            self.close()


class Pool:
    """Idle keep-alive connections to one endpoint. Never caps busy connections: a request that finds
    no idle connection opens a new one at once (queueing inside the client would hide latency). Up to
    ``max_idle`` connections are kept open between requests; extra ones are closed."""

    def __init__(self, endpoint: Endpoint, tls: ssl.SSLContext | None, connect_timeout_s: float,
                 max_idle: int, now: Callable[[], int]) -> None:
        self.inbox = Inbox(now)
        self.endpoint = endpoint
        self.tls = tls
        self.connect_timeout_s = connect_timeout_s
        self.max_idle = max(1, max_idle)
        self._idle: list[Conn] = []
        self._all: set[Conn] = set()
        self.opened = 0  # connections ever opened (diagnostics: should stay near the concurrency)

    async def acquire(self) -> Conn:
        """An idle open connection (most recently used first), or a new one.

        Raises ``TimeoutError`` after the connect timeout and ``OSError`` when the connect fails.
        """
        self.inbox.flush()  # bytes an idle socket got since its last answer close it before it is picked
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed and not conn.transport.is_closing():  # type: ignore[union-attr]
                return conn
        return await self.connect()

    async def connect(self) -> Conn:
        loop = asyncio.get_running_loop()
        ep = self.endpoint
        async with asyncio.timeout(self.connect_timeout_s):
            _, conn = await loop.create_connection(
                lambda: Conn(self), ep.host, ep.port, ssl=self.tls,
                server_hostname=ep.host if self.tls is not None else None,
            )
        self.opened += 1
        self._all.add(conn)
        return conn

    def _release(self, conn: Conn) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    def _forget(self, conn: Conn) -> None:
        self._all.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)

    @property
    def idle_count(self) -> int:
        return len(self._idle)

    async def aclose(self) -> None:
        """Close every connection, idle or busy (busy exchanges end as ``disconnected``)."""
        conns = list(self._all)
        self._idle.clear()
        for conn in conns:
            conn.close()
        if conns:
            await asyncio.sleep(0)  # let connection_lost callbacks run
