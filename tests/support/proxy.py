"""A recording, fault-injecting HTTP/1.1 reverse proxy for loopback tests (stdlib only).

It sits in front of Azurite so a test can see exactly which requests a client sent (method, path,
query such as ``comp=block&blockid=...``) and make chosen requests fail: answer with a status
(503 + Retry-After, 500, 429) instead of forwarding, cut a response body short, corrupt one byte
of it, rewrite response headers, or hold a request until the test releases it (to kill the client
while it waits).

SharedKey signs the method, the path, the query and most headers, so requests are forwarded with
path, query, header names, values and order untouched. Only Host (not signed), hop-by-hop headers
and ``Expect`` (not signed either; http.client cannot do 100-continue) are changed.

Every fault is bounded: a rule fires at most ``count`` times and a stall waits at most
``stall_timeout`` seconds, so a test that forgets to release cannot hang the suite.
"""

from __future__ import annotations

import http.client
import http.server
import random
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

# Headers that describe one hop, not the message; never forwarded as received.
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "transfer-encoding",
    "expect",
}

_ERROR_CODES = {
    500: "InternalError",
    503: "ServerBusy",
    429: "TooManyRequests",
    408: "OperationTimedOut",
}

ABSENT = object()
"""Use as a value in ``Rule.query`` to require that a parameter is not in the query at all."""


@dataclass
class Rule:
    """What to do to which requests.

    action:
      ``status``     answer ``status`` with ``headers`` without contacting the upstream.
      ``truncate``   forward, send the response head and ``body_bytes`` of the body, then close.
      ``stall``      hold the request (before its body is read) until released or timed out, then
                     ``after_stall``: ``forward`` it or ``drop`` the connection without an answer.
      ``stall_body`` forward, send the head and ``body_bytes`` of the body, hold until released or
                     timed out, then close the connection.
      ``corrupt``    forward, but flip every bit of the response body's byte at offset ``body_bytes``
                     (a body that short passes untouched; ``cut`` tells whether it was flipped).
      ``set_headers`` forward, but send ``headers`` in place of the upstream's headers of those
                     names (added if upstream had none).
      ``drop_query`` forward without the query parameters named in ``drop`` (a server that does
                     not know them; with a SAS, which signs no other parameter).
    A request matches when ``method`` equals, ``path`` (a regex searched in the percent-decoded
    path) matches and every ``query`` item holds (value equal; ``None``: present; ``ABSENT``:
    missing). The first ``skip`` matches pass untouched; the next ``count`` get the action, each
    with ``probability`` (drawn from a generator seeded with ``seed``, so a run repeats).
    """

    action: str
    method: str | None = None
    path: str | None = None
    query: dict = field(default_factory=dict)
    skip: int = 0
    count: int = 1
    status: int = 503
    headers: dict = field(default_factory=dict)
    drop: tuple = ()
    body_bytes: int = 0
    stall_timeout: float = 30.0
    after_stall: str = "forward"
    probability: float = 1.0
    seed: int = 0
    matched: int = 0
    fired: int = 0
    _released: threading.Event = field(default_factory=threading.Event, repr=False)
    _rng: random.Random = field(default=None, repr=False)

    def __post_init__(self):
        if self.action not in (
            "status",
            "truncate",
            "stall",
            "stall_body",
            "corrupt",
            "set_headers",
            "drop_query",
        ):
            raise ValueError(f"unknown action {self.action!r}")
        if self.after_stall not in ("forward", "drop"):
            raise ValueError(f"unknown after_stall {self.after_stall!r}")
        if not 0 < self.count <= 10_000 or not 0 < self.stall_timeout <= 600:
            raise ValueError("a rule needs a bounded count and stall timeout")
        if not 0 < self.probability <= 1:
            raise ValueError("probability is in (0, 1]")
        self._rng = random.Random(self.seed)

    def fires(self) -> bool:
        """Called for a match past ``skip``: whether this one gets the action."""
        if self.fired >= self.count:
            return False
        return self.probability >= 1 or self._rng.random() < self.probability

    def matches(self, method: str, path: str, query: dict) -> bool:
        if self.method is not None and method != self.method:
            return False
        if self.path is not None and not re.search(self.path, path):
            return False
        for key, want in self.query.items():
            if want is ABSENT:
                if key in query:
                    return False
            elif key not in query or (want is not None and query[key] != want):
                return False
        return True


@dataclass
class Request:
    seq: int
    method: str
    raw_path: str
    path: str
    query: dict
    headers: list
    action: str | None = None
    status: int | None = None
    done: bool = False
    body_sent: int = 0  # response body bytes relayed to the client
    # Set when the exchange broke off (the client or upstream went away mid-way): what broke.
    error: str | None = None
    # A truncate or stall_body rule really cut the body short (it was longer than body_bytes), or
    # a corrupt rule really flipped a byte.
    cut: bool = False

    @property
    def comp(self) -> str | None:
        return self.query.get("comp")

    @property
    def block_id(self) -> str | None:
        return self.query.get("blockid")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Idle keep-alive connections and half-sent bodies must not pin a thread forever.
    timeout = 120
    proxy: FaultProxy

    def log_message(self, format, *args):  # noqa: A002 - signature fixed by the base class
        pass

    def handle_expect_100(self):
        # The body is read after any stall, so the client may send it straight away.
        self.send_response_only(100)
        self.end_headers()
        return True

    def _upstream_conn(self) -> http.client.HTTPConnection:
        conn = getattr(self, "_conn", None)
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.proxy.upstream_port, timeout=60)
            self._conn = conn
        return conn

    def _drop_upstream(self):
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            self._conn = None

    def _abort_client(self):
        """Close the client connection at once, as a network failure would."""
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_body(self) -> tuple[bytes, bool]:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size_line = self.rfile.readline(65537)
                if not size_line:
                    raise ConnectionError("chunked request body cut short")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    # Trailers end at the first blank line.
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts), True
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            # Forwarding a short body under the full Content-Length would leave upstream waiting.
            raise ConnectionError(f"request body cut short: {len(body)} of {length} bytes")
        return body, False

    def _handle(self):
        proxy = self.proxy
        split = urllib.parse.urlsplit(self.path)
        query = {
            k: v[0] for k, v in urllib.parse.parse_qs(split.query, keep_blank_values=True).items()
        }
        record, rule = proxy._admit(
            self.command,
            self.path,
            urllib.parse.unquote(split.path),
            query,
            list(self.headers.items()),
        )
        try:
            self._serve(record, rule)
        except (OSError, http.client.HTTPException) as e:
            # The client or upstream went away mid-exchange; the next request gets a fresh link.
            record.error = f"{type(e).__name__}: {e}"
            self._drop_upstream()
            self.close_connection = True
        finally:
            proxy._finish(record)

    def _serve(self, record: Request, rule: Rule | None):
        proxy = self.proxy
        if rule is not None and rule.action == "stall":
            proxy._stall(rule)
            if rule.after_stall == "drop":
                self._abort_client()
                return
        body, chunked = self._read_body()
        if rule is not None and rule.action == "status":
            self._reply_fault(record, rule)
            return
        path = self.path
        if rule is not None and rule.action == "drop_query":
            split = urllib.parse.urlsplit(path)
            kept = [
                (k, v)
                for k, v in urllib.parse.parse_qsl(split.query, keep_blank_values=True)
                if k not in rule.drop
            ]
            path = urllib.parse.urlunsplit(
                split._replace(query=urllib.parse.urlencode(kept, quote_via=urllib.parse.quote))
            )
        resp = self._forward(path, body, chunked)
        record.status = resp.status
        self._relay(resp, rule, record)

    def _reply_fault(self, record: Request, rule: Rule):
        code = _ERROR_CODES.get(rule.status, "InjectedFault")
        payload = (
            f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
            "<Message>fault injected by the ferry test proxy</Message></Error>"
        ).encode()
        self.send_response_only(rule.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-ms-error-code", code)
        for name, value in rule.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        record.status = rule.status

    def _forward(self, path: str, body: bytes, chunked: bool) -> http.client.HTTPResponse:
        for attempt in (1, 2):
            conn = self._upstream_conn()
            try:
                conn.putrequest(self.command, path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    lname = name.lower()
                    if lname in _HOP_BY_HOP:
                        continue
                    if lname == "host":
                        value = f"127.0.0.1:{self.proxy.upstream_port}"
                    conn.putheader(name, value)
                if chunked:
                    conn.putheader("Transfer-Encoding", "chunked")
                    conn.endheaders()
                    if body:
                        conn.send(b"%x\r\n%s\r\n" % (len(body), body))
                    conn.send(b"0\r\n\r\n")
                else:
                    conn.endheaders(body if body else None)
                return conn.getresponse()
            except (ConnectionError, http.client.RemoteDisconnected, BrokenPipeError):
                # A pooled upstream connection that Azurite closed while idle: retry once, fresh.
                self._drop_upstream()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _relay(self, resp: http.client.HTTPResponse, rule: Rule | None, record: Request):
        self.send_response_only(resp.status, resp.reason)
        has_body = self.command != "HEAD" and resp.status not in (204, 304) and resp.status >= 200
        rechunk = has_body and resp.chunked
        length = resp.getheader("Content-Length")
        until_close = has_body and not rechunk and length is None
        replaced = (
            {k.lower(): v for k, v in rule.headers.items()}
            if rule and rule.action == "set_headers"
            else {}
        )
        for name, value in resp.getheaders():
            if name.lower() in _HOP_BY_HOP or name.lower() in replaced:
                continue
            self.send_header(name, value)
        for name, value in replaced.items():
            self.send_header(name, value)
        if rechunk:
            self.send_header("Transfer-Encoding", "chunked")
        if until_close or resp.will_close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()

        cut_at = None
        if rule is not None and rule.action in ("truncate", "stall_body"):
            cut_at = rule.body_bytes
        sent = 0
        while has_body:
            want = 65536 if cut_at is None else min(65536, cut_at - sent)
            if want <= 0:
                break
            piece = resp.read(want)
            if not piece:
                break
            if (
                rule is not None
                and rule.action == "corrupt"
                and sent <= rule.body_bytes < sent + len(piece)
            ):
                at = rule.body_bytes - sent
                piece = piece[:at] + bytes([piece[at] ^ 0xFF]) + piece[at + 1 :]
                record.cut = True
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if rechunk else piece)
            sent += len(piece)
            record.body_sent = sent
        if cut_at is not None:
            record.cut = has_body and (length is None or sent < int(length))
        # A body shorter than the cut went whole: the exchange ends as any other, the client's
        # connection kept (closing it would make the client's next request on it fail, a
        # connection error no rule injected).
        if cut_at is not None and (record.cut or rule.action == "stall_body"):
            self.wfile.flush()
            if rule.action == "stall_body":
                self.proxy._stall(rule)
            # The rest of the upstream body was never read: that connection is unusable now.
            self._drop_upstream()
            self._abort_client()
            return
        if rechunk:
            self.wfile.write(b"0\r\n\r\n")
        if not has_body:
            # Finishes the (empty) response, else http.client refuses the next request on the
            # pooled upstream connection (seen after a HEAD).
            resp.read()
        if resp.will_close:
            self._drop_upstream()

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = do_OPTIONS = do_PATCH = _handle


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request, client_address):
        # Clients killed with SIGKILL and deliberate aborts end connections rudely; that is the point.
        pass


class FaultProxy:
    """``with FaultProxy(upstream_port) as proxy:`` then aim clients at ``proxy.port``."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self._cond = threading.Condition()
        self._rules: list[Rule] = []
        self._log: list[Request] = []
        self._seq = 0
        self._inflight = 0
        self._stalled = 0
        handler = type("BoundHandler", (_Handler,), {"proxy": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self.port = self._server.server_address[1]
        # A short poll interval keeps stop() (and so each test's teardown) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fault-proxy",
            daemon=True,
        )

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self):
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- rules -------------------------------------------------------------------------------
    def add(self, action: str, **kwargs) -> Rule:
        rule = Rule(action, **kwargs)
        with self._cond:
            self._rules.append(rule)
        return rule

    def clear_rules(self):
        """Forget all rules; anything still stalled is released first."""
        self.release()
        with self._cond:
            self._rules.clear()

    def release(self, rule: Rule | None = None):
        with self._cond:
            for r in [rule] if rule else self._rules:
                r._released.set()

    # -- what happened -----------------------------------------------------------------------
    def requests(
        self, method: str | None = None, comp: str | None | object = None, path: str | None = None
    ) -> list[Request]:
        """Logged requests, oldest first; ``comp=ABSENT`` selects those without a comp parameter."""
        with self._cond:
            log = list(self._log)
        out = []
        for r in log:
            if method is not None and r.method != method:
                continue
            if comp is ABSENT and "comp" in r.query:
                continue
            if comp is not None and comp is not ABSENT and r.comp != comp:
                continue
            if path is not None and not re.search(path, r.path):
                continue
            out.append(r)
        return out

    def bytes_served(self, method: str = "GET", comp: str | None | object = ABSENT) -> int:
        """Response body bytes of the selected successful requests; by default blob reads (GET
        without a comp parameter), i.e. the data clients downloaded (error bodies not counted)."""
        return sum(
            r.body_sent
            for r in self.requests(method=method, comp=comp)
            if 200 <= (r.status or 0) < 300
        )

    def clear_log(self):
        with self._cond:
            self._log.clear()

    @property
    def stalled(self) -> int:
        with self._cond:
            return self._stalled

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str = "condition"):
        """Poll ``predicate`` (it may call back into the proxy) until true; raise on timeout."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"proxy: timed out after {timeout}s waiting for {what}")
            with self._cond:
                self._cond.wait(0.05)

    def wait_idle(self, timeout: float = 30.0):
        """Wait until no request is being handled (released stalls included)."""

        def idle():
            with self._cond:
                return self._inflight == 0

        self.wait_for(idle, timeout, "in-flight requests to finish")

    # -- called from handler threads ---------------------------------------------------------
    def _admit(self, method, raw_path, path, query, headers) -> tuple[Request, Rule | None]:
        with self._cond:
            self._seq += 1
            record = Request(self._seq, method, raw_path, path, query, headers)
            chosen = None
            for rule in self._rules:
                if not rule.matches(method, path, query):
                    continue
                rule.matched += 1
                if chosen is None and rule.matched > rule.skip and rule.fires():
                    rule.fired += 1
                    chosen = rule
            record.action = chosen.action if chosen else None
            self._log.append(record)
            self._inflight += 1
            self._cond.notify_all()
            return record, chosen

    def _finish(self, record: Request):
        with self._cond:
            record.done = True
            self._inflight -= 1
            self._cond.notify_all()

    def _stall(self, rule: Rule):
        with self._cond:
            self._stalled += 1
            self._cond.notify_all()
        try:
            rule._released.wait(rule.stall_timeout)
        finally:
            with self._cond:
                self._stalled -= 1
                self._cond.notify_all()
