"""One request/response on a connection: HTTP parsing (httptools), SSE, timing, status.

:class:`ModelExchange` is the hot path. It gets each network read with the time it arrived (stamped by
the pool's inbox), feeds the bytes to the httptools response parser (which de-chunks), takes SSE events
apart with bytes operations and ``orjson``-loads only each event's data payload (only its content
string, once the chunk layout is learned: see ``_shape``). Everything it learns goes straight into the
:class:`RequestRecord`.
:class:`PlainExchange` reads a whole small response (``/v1/models``, ``/tokenize``, ``/version``).

Callbacks never raise: a fault becomes a status via :meth:`ModelExchange.finish`, which resolves the
future the sender awaits and hands the connection back (or closes it when its state is unknown).

Connection rules (docs/faults.md): 1xx interim responses (100 Continue, 103 Early Hints) are skipped;
the socket goes back to the pool only after a message that ended in-band (Content-Length or chunked)
with no byte after it, in that read or any later one; the record's status and ``http_status`` are
never changed once it is finished; a response is capped at ``max_bytes``; a stream that goes quiet
for ``idle_s`` after a token ends as ``timeout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

import httptools
import orjson

from servelab.records.schema import DISCONNECTED, HTTP_ERROR, MALFORMED, OK, RequestRecord
from servelab.transport._deadlines import IDLE_S, Deadlines
from servelab.transport._fields import Fields, error_body
from servelab.transport._plain import PlainExchange  # noqa: F401 - re-exported (older import path)
from servelab.transport._shape import learn_shape
from servelab.transport._toolcalls import add_tool_deltas, tool_call_list
from servelab.transport._wire import body_preview, error_message, error_text
from servelab.transport.sse import DONE, SSEParser

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_ERROR_BODY_MAX = 4096
_MAX_LEARNS = 3  # layouts learned per response at most (a server whose chunks all differ costs little)
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # default per-response cap
_HEAD_MAX = 256  # bytes of an unreadable body kept for the error message

# Body modes, chosen when the headers are complete. _BAD: a 2xx body that is neither an event stream
# nor JSON (an HTML error page, an unrequested gzip body); _DRAIN: after data: [DONE], nothing counts.
_SSE, _JSON, _ERRBODY, _BAD, _DRAIN = 1, 2, 3, 4, 5


class ExchangeConn(Protocol):
    """What an exchange needs of its connection: a pooled socket (``_pool.Conn``) or the mock transport's."""

    @property
    def pool(self) -> Any: ...  # whose ``inbox.flush()`` parses what arrived before a deadline fires

    @property
    def exchange(self) -> object: ...  # the exchange the connection serves now

    def close(self) -> None: ...
    def done(self, keep_alive: bool) -> None: ...


class ModelExchange(Deadlines, Fields):
    """A chat/completions request whose answer is streamed (SSE) or whole (JSON)."""

    __slots__ = (
        "rec", "_now", "conn", "fut", "parser", "_t", "_mode", "_sse", "_body", "_text", "_times",
        "_done_ns", "_finished", "_framed", "_ctype", "_keep", "_timer", "_total_s", "_stream",
        "_usage_seen", "_pre", "_suf", "_cut_a", "_cut_b", "_learns", "_total_at", "_tools",
        "_interim", "_extra", "_feeding", "_size", "_cap", "_idle_s", "_bad", "_head", "_enc",
    )

    def __init__(self, rec: RequestRecord, now: Callable[[], int], conn: ExchangeConn, stream: bool,
                 total_s: float, idle_s: float = IDLE_S, max_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.rec = rec
        self._now = now
        self.conn = conn
        self.fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.parser = httptools.HttpResponseParser(self)
        self._t = 0
        self._mode = 0
        self._sse: SSEParser | None = None
        self._body: list[bytes] = []
        self._text: list[str] = []
        self._times = rec.token_times_ns
        self._done_ns: int | None = None
        self._finished = False
        self._framed = False  # Content-Length or chunked: the end is in-band, not the socket closing
        self._ctype = b""
        self._keep = False
        self._timer: asyncio.TimerHandle | None = None
        self._total_s = total_s
        self._stream = stream
        self._usage_seen = False
        self._pre: bytes | None = None  # learned content-chunk layout (see _shape)
        self._suf = b""
        self._cut_a = self._cut_b = 0
        self._learns = 0
        self._total_at = 0.0  # loop time of the total deadline
        self._tools: dict[int, list] | None = None  # streamed tool calls by index: [id, type, names, args]
        self._interim = False  # parsing a 1xx interim response (skipped)
        self._extra = False  # bytes came after the message: the socket is not reusable
        self._feeding = False  # inside parser.feed_data: the socket is released after it returns
        self._size = 0  # response bytes so far
        self._cap = max_bytes
        self._idle_s = idle_s
        self._bad: str | None = None  # a fault in a field (usage, finish_reason): an ok becomes malformed
        self._head = b""  # the first bytes of the body outside the fast path (for error messages)
        self._enc = b""  # Content-Encoding

    # -- connection callbacks -----------------------------------------------------------------------


    def release(self) -> None:
        """Let go of the parser once the exchange is answered: the two hold each other (the parser calls back
        into the exchange), a cycle only the cyclic collector would free."""
        del self.parser
    def data(self, data: bytes, t: int) -> None:
        """Bytes that arrived at ``t`` (stamped by the connection's inbox)."""
        if self._finished:
            if data:  # bytes after the answer (a duplicate, an over-long body): never reuse this socket
                self.conn.close()
            return
        self._t = t
        self._size += len(data)
        self._feeding = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:  # a bug in a callback: report, never hang
            self._extra = True
            if not self._finished:
                self.finish(MALFORMED, f"client error while parsing the response: {err.__context__!r}")
        except httptools.HttpParserError as err:
            self._extra = True  # garbage after a complete message is still unread bytes
            if not self._finished:
                self.finish(MALFORMED, f"invalid HTTP response: {error_text(str(err).encode(), 200)}")
        finally:
            self._feeding = False
        if not self._finished and self._size > self._cap:
            self.finish(MALFORMED, f"response larger than the cap of {self._cap} bytes "
                                   f"(target.max_response_bytes): stopped after {self._size} bytes")
        if self._finished:
            self._release()

    def lost(self, exc: Exception | None) -> None:
        if self._finished:
            return
        self._t = self._now()
        try:
            self._lost(exc)
        except Exception as err:  # never raise out of connection_lost
            self.finish(MALFORMED, f"client error at connection close: {err!r}")

    def _lost(self, exc: Exception | None) -> None:
        mode = self._mode
        if mode and not self._framed and not self._interim:  # the body ran until the socket closed
            self.on_message_complete()
            return
        if mode == _DRAIN:
            self._conclude()
            return
        if mode == _SSE and self._sse is not None:
            for ev in self._sse.end():
                if not self._event(ev):
                    break
            if self._finished:
                return
            if self._done_ns is not None or (self.rec.finish_reason and self._times):
                self._conclude()
                return
        why = f": {error_text(str(exc).encode(), 200)}" if exc else ""
        where = "before the response" if self.rec.first_byte_ns is None else "mid-response"
        self.finish(DISCONNECTED, f"connection closed {where}{why}")

    # -- httptools callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._finished:  # a second message after ours: unread bytes
            self._extra = True
            return
        if self.rec.first_byte_ns is None:
            self.rec.first_byte_ns = self._t
        self._ctype = self._enc = b""  # (again after a 1xx interim response)
        self._framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        n = name.lower()
        if n == b"content-type":
            self._ctype = value.lower()
        elif n == b"content-length" or (n == b"transfer-encoding" and b"chunked" in value.lower()):
            self._framed = True
        elif n == b"content-encoding":
            self._enc = value.lower().strip()

    def on_headers_complete(self) -> None:
        if self._finished:
            self._extra = True
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:  # 100 Continue, 103 Early Hints: not the answer
            self._interim = True
            return
        self.rec.http_status = status
        ctype = self._ctype
        if not 200 <= status < 300:
            self._mode = _ERRBODY
        elif (self._enc and self._enc != b"identity") or b"html" in ctype or b"xml" in ctype:
            self._mode = _BAD  # nobody asked for gzip; an HTML page is a proxy's error, not an answer
        elif b"text/event-stream" in ctype or (self._stream and b"json" not in ctype):
            self._mode = _SSE
            self._sse = SSEParser()
            return
        else:
            self._mode = _JSON
        if self._stream and self._timer is not None:  # a whole body: no first token to wait for
            self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_at(self._total_at, self._on_total_deadline)

    def on_body(self, body: bytes) -> None:
        mode = self._mode  # 0 once finished: later callbacks of the same read are ignored
        if mode == _SSE:
            sse = self._sse
            # The hot case: one whole single-line "data: {...}\n\n" event and nothing half-parsed
            # (sse.single_data, inlined).
            end = len(body) - 2
            if (not sse.pending and body.find(b"\n") == end and body[-1] == 10  # type: ignore[union-attr]
                    and body.startswith(b"data: ") and 13 not in body):
                self._payload(body[6:end])
                return
            if len(self._head) < _HEAD_MAX:
                self._head += body[:_HEAD_MAX]
            for ev in sse.feed(body):  # type: ignore[union-attr]
                if not self._event(ev):
                    return
        elif mode == _JSON:
            self._body.append(body)
        elif mode == _ERRBODY or mode == _BAD:
            if sum(map(len, self._body)) < _ERROR_BODY_MAX:
                self._body.append(body)
        elif not mode and self._finished:
            self._extra = True

    def on_message_complete(self) -> None:
        if self._finished:
            self._extra = True
            return
        if self._interim:
            self._interim = False
            return
        try:
            self._keep = self.parser.should_keep_alive()
        except httptools.HttpParserError:
            self._keep = False
        mode = self._mode
        if mode == _SSE:
            for ev in self._sse.end():  # type: ignore[union-attr]
                if not self._event(ev):
                    break
            if not self._finished:
                self._conclude()
        elif mode == _DRAIN:
            self._conclude()
        elif mode == _JSON:
            self._whole_body()
        elif mode == _BAD:
            what = (b"Content-Encoding " + self._enc) if self._enc else (self._ctype or b"no Content-Type")
            self.finish(MALFORMED, f"HTTP {self.rec.http_status} with a {error_text(what, 80)} body, not an "
                                   f"answer: {body_preview(b''.join(self._body))}")
        else:
            self.finish(HTTP_ERROR, f"HTTP {self.rec.http_status}: {error_body(b''.join(self._body))}")

    # -- SSE events (hot) ---------------------------------------------------------------------------

    def _event(self, ev: tuple) -> bool:
        """Apply one parsed event; False when nothing after it counts (an error, garbage, [DONE])."""
        name = ev[1]
        if name and name != b"message":
            if name == b"error":
                self.finish(HTTP_ERROR, f"error event in stream: {error_text(ev[0])}")
                return False
            return True  # other named events (pings, vendor extras) carry nothing we measure
        return self._payload(ev[0])

    def _payload(self, data: bytes) -> bool:
        """Apply one event's data to the record; False when it ended the exchange.

        The hot case, a chat chunk with non-empty ``delta.content`` or a completions chunk with a
        non-empty ``text``, is handled here: first by the chunk layout learned from an earlier chunk of
        this response (see ``_shape``: only the content string is decoded), else by a whole parse.
        Every other shape (role/usage/finish-only chunks, reasoning, tool calls, errors, [DONE]) goes to
        :meth:`_other`, which parses again: that happens a few times per response only.
        """
        pre = self._pre
        if pre is not None and data.startswith(pre) and data.endswith(self._suf):
            try:
                content = _loads(data[self._cut_a : len(data) - self._cut_b])
            except _JSONDecodeError:
                content = None
            if content:  # a JSON string literal decodes to a str; "" is not a token
                self._times.append(self._t)
                self._text.append(content)
                return True
        try:
            obj = _loads(data)
            c = obj["choices"][0]
            delta = c.get("delta")
            content = c["text"] if delta is None else delta["content"]  # completions: "text"
        except Exception:
            return self._other(data)
        if not content or content.__class__ is not str or (delta is not None and "tool_calls" in delta):
            return self._other(data)
        t = self._t
        rec = self.rec
        self._times.append(t)
        self._text.append(content)
        if rec.first_content_ns is None:
            rec.first_content_ns = t
            if rec.first_token_ns is None:
                rec.first_token_ns = t
                self._first()
        fr = c.get("finish_reason")
        if fr:
            self._finish_reason(fr)
        usage = obj.get("usage")
        if usage is not None:
            self._usage(usage)
        elif not fr and self._learns < _MAX_LEARNS:  # a plain content chunk: learn its layout
            self._learns += 1
            shape = learn_shape(data, content, text=delta is None)
            if shape is not None:
                self._pre, self._suf = shape
                self._cut_a, self._cut_b = len(shape[0]) - 1, len(shape[1]) - 1
        return True

    def _other(self, data: bytes) -> bool:
        """Any event data but a plain content chunk."""
        try:
            obj = _loads(data)
        except _JSONDecodeError:
            if data == DONE:
                self._done_ns = self._t
                self._mode = _DRAIN  # what follows [DONE] is not part of the answer
                return False
            self.finish(MALFORMED, f"unparseable SSE data: {body_preview(data)}")
            return False
        if obj.__class__ is not dict:
            self.finish(MALFORMED, f"SSE data is not a JSON object: {body_preview(data)}")
            return False
        choices = obj.get("choices")
        if choices and choices.__class__ is list and choices[0].__class__ is dict:
            c = choices[0]
            delta = c.get("delta")
            if delta.__class__ is dict:
                content = delta.get("content")
                reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                tool = delta.get("tool_calls")
            else:
                content = c.get("text")
                reasoning = tool = None
            if tool:
                if self._tools is None:
                    self._tools = {}
                add_tool_deltas(self._tools, tool)
            if content or reasoning or tool:
                t = self._t
                rec = self.rec
                self._times.append(t)
                if rec.first_token_ns is None:
                    rec.first_token_ns = t
                    self._first()
                if content:
                    self._text.append(str(content))
                    if rec.first_content_ns is None:
                        rec.first_content_ns = t
                elif reasoning:
                    if rec.first_reasoning_ns is None:
                        rec.first_reasoning_ns = t
                elif rec.first_content_ns is None:  # a tool call is visible output too
                    rec.first_content_ns = t
            fr = c.get("finish_reason")
            if fr:
                self._finish_reason(fr)
        usage = obj.get("usage")
        if usage is not None:
            self._usage(usage)
        elif not choices and ("error" in obj or obj.get("object") == "error"):
            self.finish(HTTP_ERROR, f"error in stream: {error_message(obj)}")
            return False
        return True

    # -- endings ------------------------------------------------------------------------------------

    def _conclude(self) -> None:
        """The stream ended in-band: decide between ok and the failure that explains it."""
        rec = self.rec
        rec.est_completion_tokens = len(self._times)
        if self._done_ns is not None:
            rec.end_ns = self._done_ns
        if self._done_ns is None and not rec.finish_reason and not self._times and not self._usage_seen:
            # Nothing of an OpenAI stream at all: an empty 200, or a body in some other format.
            self.finish(MALFORMED, f"HTTP {rec.http_status} body is not an OpenAI event stream: "
                                   f"{body_preview(self._head)}")
        elif self._done_ns is None and not rec.finish_reason:
            self.finish(DISCONNECTED, "stream ended without [DONE] and without a finish_reason")
        elif not self._times:
            what = "only usage" if self._usage_seen else "no token"
            self.finish(MALFORMED, f"stream ended with {what}: zero tokens received")
        else:
            self.finish(OK, None)

    def finish(self, status: str, error: str | None) -> None:
        """End the exchange: fill the record's end, resolve the future, release or close the socket."""
        if self._finished:
            return
        self._finished = True
        self._mode = 0
        if status == OK and self._bad is not None:
            status, error = MALFORMED, self._bad
        rec = self.rec
        if self._times:
            rec.last_token_ns = self._times[-1]
        rec.status = status
        rec.error = error
        if rec.end_ns is None:
            rec.end_ns = self._t
        if self._text:
            rec.output_text = "".join(self._text)
        if self._tools:
            rec.tool_calls = tool_call_list(self._tools)
        if status != OK or rec.est_completion_tokens == 0:
            rec.est_completion_tokens = len(self._times)
        if self._timer is not None:
            self._timer.cancel()
        if not self._feeding:  # inside feed_data, data() releases once it knows whether bytes followed
            self._release()
        if not self.fut.done():
            self.fut.set_result(None)

    def _release(self) -> None:
        """Reuse only a socket whose message ended cleanly in-band with nothing after it; else close."""
        conn = self.conn
        if conn.exchange is self:
            conn.done(self._keep and not self._extra and self._framed)

    def abort(self, status: str, error: str) -> None:
        """The sender gave up (cancelled): close the socket, whatever state it is in."""
        self._keep = False
        self._t = self._now()
        self.finish(status, error)
