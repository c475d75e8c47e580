"""A small request read whole (``/v1/models``, ``/tokenize``, ``/version``): status, headers, body.

Same connection rules as the model exchange (see ``_exchange``): 1xx interim responses are skipped, the
body is capped, and the connection goes back to the pool only when the message ended cleanly with no
byte after it.
"""

from __future__ import annotations

import asyncio

import httptools

from servelab.transport._pool import Conn

PLAIN_BODY_MAX = 8 * 1024 * 1024  # bytes: these answers are small; a bigger one is a fault


class PlainExchange:
    """A small request read whole: status, lower-cased headers, body."""

    __slots__ = ("conn", "fut", "parser", "status", "headers", "_body", "_keep", "_framed", "_done",
                 "_interim", "_extra", "_feeding", "_size", "_cap")

    def __init__(self, conn: Conn, max_bytes: int = PLAIN_BODY_MAX) -> None:
        self.conn = conn
        self.fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._keep = False
        self._framed = False
        self._done = False
        self._interim = False
        self._extra = False  # bytes after the message: the socket is not reusable
        self._feeding = False
        self._size = 0
        self._cap = max_bytes

    @property
    def body(self) -> bytes:
        return b"".join(self._body)

    def data(self, data: bytes, t: int = 0) -> None:
        if self._done:
            if data:
                self.conn.close()  # unread bytes after the answer: never reuse this socket
            return
        self._size += len(data)
        self._feeding = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            if self._done:
                self._extra = True
            else:
                self._end(ConnectionError(f"invalid HTTP response: {err}"))
        finally:
            self._feeding = False
        if not self._done and self._size > self._cap:
            self._end(ConnectionAbortedError(f"response larger than {self._cap} bytes"))
        if self._done:
            self._release()

    def lost(self, exc: Exception | None) -> None:
        if self.status and not self._framed and not self._interim:
            self._end(None)
        else:
            self._end(exc or ConnectionResetError("connection closed before the response ended"))

    def on_message_begin(self) -> None:
        if self._done:
            self._extra = True
            return
        self.headers = {}
        self._framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._done:
            return
        n = name.decode("latin-1").lower()
        self.headers[n] = value.decode("latin-1")
        if n == "content-length" or (n == "transfer-encoding" and "chunked" in self.headers[n].lower()):
            self._framed = True

    def on_headers_complete(self) -> None:
        if self._done:
            return
        status = self.parser.get_status_code()
        self._interim = 100 <= status < 200 and status != 101  # 100 Continue, 103 Early Hints: skip
        if not self._interim:
            self.status = status

    def on_body(self, body: bytes) -> None:
        if not self._done:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._done:
            self._extra = True
            return
        if self._interim:
            self._interim = False
            return
        try:
            self._keep = self.parser.should_keep_alive()
        except httptools.HttpParserError:
            self._keep = False
        self._end(None)

    def _end(self, exc: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        if exc is not None:
            self._keep = False
        if not self._feeding:
            self._release()
        if not self.fut.done():
            if exc is None:
                self.fut.set_result(None)
            else:
                self.fut.set_exception(exc)

    def _release(self) -> None:
        if self.conn.exchange is self:
            self.conn.done(self._keep and not self._extra)
