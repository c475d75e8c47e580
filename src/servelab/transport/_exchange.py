"""One request/response on a connection: HTTP parsing (httptools), SSE, timing, status.

:class:`ModelExchange` is the hot path. It gets each network read with the time it arrived (stamped by
the pool's inbox), feeds the bytes to the httptools response parser (which de-chunks), takes SSE events
apart with bytes operations and ``orjson``-loads only each event's data payload (only its content
string, once the chunk layout is learned: see ``_shape``). Everything it learns goes straight into the
:class:`RequestRecord`.
:class:`PlainExchange` reads a whole small response (``/v1/models``, ``/tokenize``, ``/version``).

Callbacks never raise: a fault becomes a status via :meth:`ModelExchange.finish`, which resolves the
future the sender awaits and hands the connection back (or closes it when its state is unknown).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httptools
import orjson

from servelab.records.schema import DISCONNECTED, HTTP_ERROR, MALFORMED, OK, TIMEOUT, RequestRecord
from servelab.transport._pool import Conn
from servelab.transport._shape import learn_shape
from servelab.transport._toolcalls import add_tool_deltas, tool_call_list
from servelab.transport._wire import error_message, error_text
from servelab.transport.sse import DONE, SSEParser

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_ERROR_BODY_MAX = 4096
_MAX_LEARNS = 3  # layouts learned per response at most (a server whose chunks all differ costs little)

# Body modes, chosen when the headers are complete.
_SSE, _JSON, _ERRBODY = 1, 2, 3


class ModelExchange:
    """A chat/completions request whose answer is streamed (SSE) or whole (JSON)."""

    __slots__ = (
        "rec", "_now", "conn", "fut", "parser", "_t", "_mode", "_sse", "_body", "_text", "_times",
        "_done_ns", "_finished", "_framed", "_ctype", "_keep", "_timer", "_total_s", "_stream",
        "_usage_seen", "_pre", "_suf", "_cut_a", "_cut_b", "_learns", "_total_at", "_tools",
    )

    def __init__(self, rec: RequestRecord, now: Callable[[], int], conn: Conn, stream: bool,
                 total_s: float) -> None:
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

    # -- timers -------------------------------------------------------------------------------------

    def arm(self, first_token_s: float) -> None:
        """Start the timeouts (call right after the request bytes were written)."""
        loop = asyncio.get_running_loop()
        self._total_at = loop.time() + self._total_s
        if self._stream and first_token_s < self._total_s:
            self._timer = loop.call_later(first_token_s, self._on_first_token_deadline, first_token_s)
        else:
            self._timer = loop.call_later(self._total_s, self._on_total_deadline)

    def _on_first_token_deadline(self, first_token_s: float) -> None:
        self.conn.pool.inbox.flush()  # a token that arrived in time but is not parsed yet still counts
        if self._finished:
            return
        if self.rec.first_token_ns is None:
            self._t = self._now()
            self.finish(TIMEOUT, f"no token within the first-token timeout of {first_token_s:g} s")
            return
        self._timer = asyncio.get_running_loop().call_later(self._total_s - first_token_s,
                                                            self._on_total_deadline)

    def _on_total_deadline(self) -> None:
        self.conn.pool.inbox.flush()
        if self._finished:
            return
        self._t = self._now()
        if self._done_ns is not None:  # [DONE] arrived but the HTTP message never ended: data is whole
            self._conclude()
            return
        self.finish(TIMEOUT, f"response not complete within the total timeout of {self._total_s:g} s")

    # -- connection callbacks -----------------------------------------------------------------------

    def data(self, data: bytes, t: int) -> None:
        """Bytes that arrived at ``t`` (stamped by the connection's inbox)."""
        if self._finished:
            return
        self._t = t
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as err:  # a bug in a callback: report, never hang
            if not self._finished:
                self.finish(MALFORMED, f"client error while parsing the response: {err.__context__!r}")
        except httptools.HttpParserError as err:
            if not self._finished:
                self.finish(MALFORMED, f"invalid HTTP response: {err}")

    def lost(self, exc: Exception | None) -> None:
        if self._finished:
            return
        self._t = self._now()
        if self._mode and not self._framed:  # the body ran until the socket closed: that is its end
            self.on_message_complete()
            return
        if self._mode == _SSE and self._sse is not None:
            for ev in self._sse.end():
                if not self._event(ev):
                    return
            if self._done_ns is not None or (self.rec.finish_reason and self._times):
                self._conclude()
                return
        why = f": {exc}" if exc else ""
        where = "before the response" if self.rec.first_byte_ns is None else "mid-response"
        self.finish(DISCONNECTED, f"connection closed {where}{why}")

    # -- httptools callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.rec.first_byte_ns is None:
            self.rec.first_byte_ns = self._t

    def on_header(self, name: bytes, value: bytes) -> None:
        n = name.lower()
        if n == b"content-type":
            self._ctype = value.lower()
        elif n == b"content-length" or (n == b"transfer-encoding" and b"chunked" in value.lower()):
            self._framed = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        self.rec.http_status = status
        if not 200 <= status < 300:
            self._mode = _ERRBODY
        elif b"text/event-stream" in self._ctype or (self._stream and b"json" not in self._ctype):
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
            for ev in sse.feed(body):  # type: ignore[union-attr]
                if not self._event(ev):
                    return
        elif mode == _JSON:
            self._body.append(body)
        elif mode == _ERRBODY:
            if sum(map(len, self._body)) < _ERROR_BODY_MAX:
                self._body.append(body)

    def on_message_complete(self) -> None:
        if self._finished:
            return
        try:
            self._keep = self.parser.should_keep_alive()
        except httptools.HttpParserError:
            self._keep = False
        mode = self._mode
        if mode == _SSE:
            for ev in self._sse.end():  # type: ignore[union-attr]
                if not self._event(ev):
                    return
            self._conclude()
        elif mode == _JSON:
            self._whole_body()
        else:
            status = self.rec.http_status
            self.finish(HTTP_ERROR, f"HTTP {status}: {error_text(b''.join(self._body))}")

    # -- SSE events (hot) ---------------------------------------------------------------------------

    def _event(self, ev: tuple) -> bool:
        """Apply one parsed event; False when it ended the exchange (error or garbage)."""
        name = ev[1]
        if name and name != b"message":
            if name == b"error":
                self.finish(HTTP_ERROR, f"error event in stream: {error_text(ev[0])}")
                return False
            return True  # other named events (pings, vendor extras) carry nothing we measure
        return self._payload(ev[0])

    def _payload(self, data: bytes) -> bool:
        """Apply one event's data to the record; False when it ended the exchange.

        The hot case, a chat chunk with non-empty ``delta.content``, is handled here: first by the
        chunk layout learned from an earlier chunk of this response (see ``_shape``: only the content
        string is decoded), else by a whole parse. Every other shape (role/usage/finish-only chunks,
        reasoning, tool calls, completions, errors, [DONE]) goes to :meth:`_other`, which parses
        again: that happens a few times per response only.
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
            delta = c["delta"]
            content = delta["content"]
        except Exception:
            return self._other(data)
        if not content or content.__class__ is not str or "tool_calls" in delta:
            return self._other(data)
        t = self._t
        rec = self.rec
        if rec.first_content_ns is None:
            rec.first_content_ns = t
            if rec.first_token_ns is None:
                rec.first_token_ns = t
        self._times.append(t)
        self._text.append(content)
        fr = c.get("finish_reason")
        if fr:
            rec.finish_reason = fr
        usage = obj.get("usage")
        if usage:
            self._usage(usage)
        elif not fr and self._learns < _MAX_LEARNS:  # a plain content chunk: learn its layout
            self._learns += 1
            shape = learn_shape(data, content)
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
                if self._done_ns is None:
                    self._done_ns = self._t
                return True
            self.finish(MALFORMED, f"unparseable SSE data: {error_text(data, 200)}")
            return False
        if obj.__class__ is not dict:
            self.finish(MALFORMED, f"SSE data is not a JSON object: {error_text(data, 200)}")
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
                if rec.first_token_ns is None:
                    rec.first_token_ns = t
                if content:
                    self._text.append(str(content))
                    if rec.first_content_ns is None:
                        rec.first_content_ns = t
                elif reasoning:
                    if rec.first_reasoning_ns is None:
                        rec.first_reasoning_ns = t
                elif rec.first_content_ns is None:  # a tool call is visible output too
                    rec.first_content_ns = t
                self._times.append(t)
            fr = c.get("finish_reason")
            if fr:
                self.rec.finish_reason = fr
        usage = obj.get("usage")
        if usage.__class__ is dict:
            self._usage(usage)
        elif not choices and ("error" in obj or obj.get("object") == "error"):
            self.finish(HTTP_ERROR, f"error in stream: {error_message(obj)}")
            return False
        return True

    def _usage(self, usage: dict) -> None:
        rec = self.rec
        self._usage_seen = True
        rec.usage_prompt_tokens = usage.get("prompt_tokens", rec.usage_prompt_tokens)
        rec.usage_completion_tokens = usage.get("completion_tokens", rec.usage_completion_tokens)
        details = usage.get("prompt_tokens_details")
        if details:
            cached = details.get("cached_tokens")
            if cached is not None:
                rec.usage_cached_tokens = cached

    # -- endings ------------------------------------------------------------------------------------

    def _conclude(self) -> None:
        """The stream ended in-band: decide between ok and the failure that explains it."""
        rec = self.rec
        rec.est_completion_tokens = len(self._times)
        if self._done_ns is not None:
            rec.end_ns = self._done_ns
        if self._done_ns is None and not rec.finish_reason:
            self.finish(DISCONNECTED, "stream ended without [DONE] and without a finish_reason")
        elif not self._times:
            what = "only usage" if self._usage_seen else "no token"
            self.finish(MALFORMED, f"stream ended with {what}: zero tokens received")
        else:
            self.finish(OK, None)

    def _whole_body(self) -> None:
        """A non-streamed (JSON) completion: every time is when the body was complete."""
        rec = self.rec
        raw = b"".join(self._body)
        try:
            obj = _loads(raw)
        except _JSONDecodeError:
            self.finish(MALFORMED, f"unparseable JSON body: {error_text(raw, 200)}")
            return
        if obj.__class__ is not dict:
            self.finish(MALFORMED, f"JSON body is not an object: {error_text(raw, 200)}")
            return
        if "error" in obj or obj.get("object") == "error":
            self.finish(HTTP_ERROR, f"error body: {error_message(obj)}")
            return
        usage = obj.get("usage")
        if usage:
            self._usage(usage)
        choices = obj.get("choices") or [{}]
        c = choices[0] if isinstance(choices[0], dict) else {}
        msg = c.get("message")
        if isinstance(msg, dict):
            content = msg.get("content")
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            tool = msg.get("tool_calls")
        else:
            content, reasoning, tool = c.get("text"), None, None
        rec.finish_reason = c.get("finish_reason")
        t = self._t
        if content:
            self._text.append(content)
            rec.first_content_ns = t
        if reasoning:
            rec.first_reasoning_ns = t
        if tool.__class__ is list:
            self._tools = {}
            add_tool_deltas(self._tools, [dict(x, index=i) for i, x in enumerate(tool) if x.__class__ is dict])
        produced = rec.usage_completion_tokens
        if not (content or reasoning or tool) and not produced:
            self.finish(MALFORMED, "response carries no generated text and no completion tokens")
            return
        rec.first_token_ns = rec.last_token_ns = t
        self._times.append(t)
        rec.est_completion_tokens = produced if produced is not None else 1
        self.finish(OK, None)

    def finish(self, status: str, error: str | None) -> None:
        """End the exchange: fill the record's end, resolve the future, release or close the socket."""
        if self._finished:
            return
        self._finished = True
        self._mode = 0
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
        conn = self.conn
        if conn.exchange is self:
            # Reuse only a socket whose message ended cleanly; anything else leaves unread bytes.
            conn.done(self._keep)
        if not self.fut.done():
            self.fut.set_result(None)

    def abort(self, status: str, error: str) -> None:
        """The sender gave up (cancelled): close the socket, whatever state it is in."""
        self._keep = False
        self._t = self._now()
        self.finish(status, error)


class PlainExchange:
    """A small request read whole: status, lower-cased headers, body."""

    __slots__ = ("conn", "fut", "parser", "status", "headers", "_body", "_keep", "_framed", "_done")

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._keep = False
        self._framed = False
        self._done = False

    @property
    def body(self) -> bytes:
        return b"".join(self._body)

    def data(self, data: bytes, t: int = 0) -> None:
        if self._done:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            self._end(err)

    def lost(self, exc: Exception | None) -> None:
        if self.status and not self._framed:
            self._end(None)
        else:
            self._end(exc or ConnectionResetError("connection closed before the response ended"))

    def on_header(self, name: bytes, value: bytes) -> None:
        n = name.decode("latin-1").lower()
        self.headers[n] = value.decode("latin-1")
        if n == "content-length" or (n == "transfer-encoding" and "chunked" in self.headers[n].lower()):
            self._framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._keep = self.parser.should_keep_alive()
        self._end(None)

    def _end(self, exc: BaseException | None) -> None:
        if self._done:
            return
        self._done = True
        if self.conn.exchange is self:
            self.conn.done(self._keep and exc is None)
        if not self.fut.done():
            if exc is None:
                self.fut.set_result(None)
            else:
                self.fut.set_exception(exc)
