"""HTTP/1.1 to one tether server or to the several servers of a replicated log (the leader and
its hot standbys), with tether's error answers turned into TetherError. The standard library
only.

A client of several servers finds the leader among them and goes past a server that is away,
a standby, starting, or alive and silent (a paused process, a frozen VM, a hung disk, whose
kernel still takes the connection), by the Go client's rules (transport/client/servers.go):

1. Before its first request, and before a request that is not safe to repeat when the server
   it talks to has not answered for ``hedge_after``, it asks every server's /readyz at once and
   moves to the one that answers that it leads.
2. A request that never reached a server, or that a standby or a starting server refused, goes
   at once to the next server, or to the leader the standby named.
3. A request safe to repeat that has no answer after ``hedge_after`` goes to the next server
   too; the servers that answered that they stand by are asked again while another is awaited,
   so a request held by a paused leader is taken by the new one as soon as it leads. The first
   answer that is not a failover's wins.
4. A request that is not safe to repeat (a submit without an idempotency key) goes to one
   server at a time, never twice, and past the first only to a server that answered within
   ``hedge_after``; if the server took it and gave no answer in time, it fails with
   UNREACHABLE (it may have landed), and the client moves off that server.
"""

from __future__ import annotations

import http.client
import json
import queue
import random
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _ijson
from .errors import TLS_ERROR, UNREACHABLE, TetherError

USER_AGENT = "tether-python/0.1"

#: Seconds a request waits for an answer beyond what it asks the server to wait (a long poll).
REQUEST_TIMEOUT = 30.0

#: Seconds a connection may take to be made: a server that does not take it counts as one that
#: cannot be reached (a machine gone, a partition), and the request goes to the next server.
CONNECT_TIMEOUT = 5.0

#: Seconds a request safe to repeat waits for a server's answer before it goes to the next
#: server too; a request that is not goes only to a server that answered within it. Far above a
#: healthy server's answer, far below a paused server's silence.
HEDGE_AFTER = 1.0

#: A kept-alive connection idle this long is not used again: the server closes idle ones after
#: two minutes, and a request on one it just closed may or may not have been read.
IDLE_REUSE_MAX = 60.0

#: The answers of a server that does not take requests now, as a failover leaves it: a request
#: safe to repeat goes on to another server.
_FAILOVER_CODES = frozenset({"STANDBY", "NOT_READY", "UNAVAILABLE", UNREACHABLE})


class _Unreached(TetherError):
    """The connection could not be made: the request surely did not reach the server."""


class _Silent(TetherError):
    """The server took the connection and gave no answer in time."""


class _Abandoned(Exception):
    """A try another server's answer made needless."""


def split_servers(url: Union[str, Sequence[str]]) -> List[str]:
    """The servers of a URL list: comma-separated, or a sequence."""
    urls = url.split(",") if isinstance(url, str) else list(url)
    return [u.strip() for u in urls if u.strip()]


class _Server:
    """One server's address."""

    def __init__(self, url: str):
        u = urllib.parse.urlsplit(url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"tether: the server URL must be http(s)://host[:port], got {url!r}")
        self.url = f"{u.scheme}://{u.netloc}"
        self.scheme, self.host, self.port, self.prefix = u.scheme, u.hostname, u.port, u.path


class _Try:
    """One request to one server, which another thread may cut short."""

    def __init__(self) -> None:
        self.conn: Optional[http.client.HTTPConnection] = None
        self.abandoned = False

    def abandon(self) -> None:
        self.abandoned = True
        conn = self.conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def repeatable(method: str, path: str, body: Any, headers: Optional[Dict[str, str]]) -> bool:
    """Whether a request may be sent again after it may have reached a server (the Go client's
    rule): reads; a submit, flow or schedule under its idempotency key or name; and actions
    whose second time changes nothing (cancel, re-drive, release, pause, resume, delete)."""
    if method != "POST":
        return True
    if any(k.lower() == "idempotency-key" and v for k, v in (headers or {}).items()):
        return True
    path = path.split("?", 1)[0]
    if path == "/v1/jobs":
        return isinstance(body, dict) and bool(body.get("idempotency_key"))
    if path == "/v1/jobs/batch":
        jobs = body.get("jobs") if isinstance(body, dict) else None
        return bool(jobs) and all(isinstance(j, dict) and j.get("idempotency_key") for j in jobs)
    if path == "/v1/schedules":
        return True
    return path.endswith(("/cancel", "/retry", "/release", "/pause", "/resume"))


def _never_taken(e: TetherError) -> bool:
    """The server surely did not act on the request: not reached, a standby, or starting."""
    return isinstance(e, _Unreached) or e.code in ("STANDBY", "NOT_READY")


def _moves_on(e: TetherError) -> bool:
    """A request safe to repeat that failed so goes to another server."""
    return e.code in _FAILOVER_CODES or e.status in (502, 504)


def _leader(e: TetherError) -> str:
    leader = e.details.get("leader") if e.code == "STANDBY" else None
    return leader if isinstance(leader, str) else ""


class _Pool:
    """Daemon threads that make hedged tries, each keeping its own kept-alive connections: a try
    abandoned on a silent server, still connecting, holds no exit of the program back."""

    def __init__(self, most: int = 32):
        self._tasks: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads, self._idle, self._most = 0, 0, most

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._idle == 0 and self._threads < self._most:
                self._threads += 1
                threading.Thread(target=self._serve, name="tether-http", daemon=True).start()
        self._tasks.put(fn)

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            fn = self._tasks.get()
            with self._lock:
                self._idle -= 1
            fn()


class Race:
    """Where one request goes next among a client's servers, by the rules above; the caller
    makes the tries (threads for HTTP, tasks for the worker's WebSocket handshake) and tells it
    what came of each. A request that is not safe to repeat is never hedged."""

    def __init__(self, http: "HTTP", safe: bool, hedged: bool, retry_for: float = 0.0):
        n = len(http._servers)
        self.h, self.safe, self.hedged = http, safe, hedged
        # For retry_for seconds, a request safe to repeat is asked again while no server takes
        # it and none is awaited; 0: each server at most twice, without waiting.
        self.deadline = time.monotonic() + retry_for if safe and retry_for > 0 else 0.0
        self.tries, self.fails, self.due = [0] * n, [0] * n, [0.0] * n
        self.silent = [False] * n  # its last try got no answer in time
        self.awaited: set = set()
        self.leader, self.last_launch = -1, 0.0

    def launched(self, i: int) -> None:
        self.tries[i] += 1
        self.last_launch = time.monotonic()
        self.awaited.add(i)

    def answered(self, i: int) -> None:
        """Server i answered the request: the client talks to it from now on."""
        self.awaited.discard(i)
        self.h.settle(i)

    def refused(self, i: int, moved: bool) -> None:
        """Server i's answer, or its silence on a request that may not go again, ends the race;
        moved: the requests after it go elsewhere."""
        self.awaited.discard(i)
        if moved:
            self.h.failover(i)
        else:
            self.h.settle(i)

    def failed(self, i: int, electing: bool, leader: str, silent: bool = False) -> int:
        """Server i did not take the request, in a way that lets it go to another (electing: a
        standby or a starting server said so, naming leader; silent: no answer came in time);
        returns the server to ask at once, -1 if none."""
        self.awaited.discard(i)
        self.fails[i] += 1
        self.silent[i] = silent
        named = self.h._index(leader)
        if named >= 0 and named in self.awaited:  # it names the leader awaited, which may be paused
            wait = _backoff(self.fails[i], 0.1, 1.0)
        elif electing:
            wait = 0.1  # a leader is being chosen: about a TTL
        else:
            wait = _backoff(self.fails[i], 0.1, 2.0)
        self.due[i] = time.monotonic() + wait
        if named >= 0:
            self.leader = named
        self.h.failover(i, leader)
        return self._pick(True)

    def _eligible(self, i: int, now: float) -> bool:
        if i in self.awaited:
            return False
        if self.tries[i] == 0:
            return self.safe or self.h._fresh(i)
        if not self.safe:
            return self.tries[i] < 2 and self.h._fresh(i)
        if self.awaited:  # asked again while another is awaited: it costs the caller nothing
            return now >= self.due[i]
        if self.deadline:
            return now < self.deadline and now >= self.due[i]
        return self.tries[i] < 2 and not self.silent[i]  # a second wait on a silent server would double it

    def _pick(self, fresh: bool) -> int:
        now, n = time.monotonic(), len(self.tries)
        ok = [i for i in range(n) if self._eligible(i, now) and (fresh or self.tries[i] > 0)]
        if self.leader in ok:
            return self.leader
        for k in range(n):
            if (self.h._current + k) % n in ok:
                return (self.h._current + k) % n
        return -1

    def wake(self) -> Optional[float]:
        """When a server may be asked without an answer coming (monotonic), None if never."""
        n, times = len(self.tries), []
        if self.hedged and self.awaited:
            times += [self.last_launch + self.h.hedge_after for i in range(n) if i not in self.awaited and self.tries[i] == 0]
            times += [self.due[i] for i in range(n) if i not in self.awaited and self.tries[i] > 0]
        elif not self.awaited and time.monotonic() < self.deadline:
            times += [min(self.due[i], self.deadline) for i in range(n) if self.tries[i] > 0]
        return min(times) if times else None

    def due_now(self) -> int:
        """The server to ask when wake() came: a new one once the hedge is due, else one due again."""
        return self._pick(time.monotonic() >= self.last_launch + self.h.hedge_after)

    def over(self) -> bool:
        """Whether no try is awaited and none will be made."""
        return not self.awaited and self.wake() is None


class HTTP:
    """Requests to one server, or to the servers of a replicated log (``url`` comma-separated,
    or a sequence). Thread-safe: each thread keeps its own keep-alive connections."""

    def __init__(self, url: Union[str, Sequence[str]], token: str = "", timeout: float = REQUEST_TIMEOUT,
                 ssl_context: Optional[ssl.SSLContext] = None, hedge_after: float = HEDGE_AFTER):
        urls = split_servers(url)
        if not urls:
            raise ValueError(f"tether: no server URL in {url!r}")
        self._servers = [_Server(u) for u in urls]
        self._current = 0
        self._answered = [0.0] * len(self._servers)  # monotonic time of each server's last answer
        self._probing = threading.Lock()
        self._pool = _Pool()
        self.token = token
        self.timeout = timeout
        self.hedge_after = hedge_after
        self._ssl = ssl_context
        self._local = threading.local()

    @property
    def url(self) -> str:
        """The server the client talks to now."""
        return self._servers[self._current].url

    @property
    def _prefix(self) -> str:
        return self._servers[self._current].prefix

    # The servers' state.

    def _heard(self, i: int) -> None:
        self._answered[i] = time.monotonic()

    def _fresh(self, i: int) -> bool:
        return self._answered[i] > 0 and time.monotonic() - self._answered[i] < self.hedge_after

    def _index(self, url: str) -> int:
        url = url.rstrip("/")
        for i, s in enumerate(self._servers):
            if url and url in (s.url, s.url + s.prefix):
                return i
        return -1

    def failover(self, i: int, leader: str = "") -> None:
        """Moves the client off server i (away, a standby, silent): to the leader named, if it
        is one of the client's servers, else to the next."""
        if self._current != i or len(self._servers) < 2:
            return
        named = self._index(leader)
        self._current = named if named >= 0 else (i + 1) % len(self._servers)

    def settle(self, i: int) -> None:
        """The client talks to server i from now on: it answered."""
        self._current = i

    def find_leader(self, safe: bool = True) -> None:
        """Rule 1: asks every server's /readyz at once, for at most hedge_after, when the server
        the client talks to never answered, or, before a request that is not safe to repeat,
        has not answered for hedge_after; moves to the first that answers 200, failing that to
        the first in the list that answered at all."""
        def need() -> bool:
            cur = self._current
            return self._answered[cur] == 0 or not safe and not self._fresh(cur)

        if len(self._servers) < 2 or not need():
            return
        with self._probing:
            if not need():
                return
            answers: "queue.Queue[Tuple[int, int]]" = queue.Queue()

            def ask(i: int) -> None:
                status = 0
                conn = self._new_connection(i, self.hedge_after)
                try:
                    conn.request("GET", self._servers[i].prefix + "/readyz", headers={"User-Agent": USER_AGENT})
                    resp = conn.getresponse()
                    resp.read()
                    status = resp.status
                    self._heard(i)
                except (OSError, http.client.HTTPException, ssl.SSLError):
                    pass
                finally:
                    conn.close()
                answers.put((i, status))

            for i in range(len(self._servers)):
                threading.Thread(target=ask, args=(i,), name="tether-readyz", daemon=True).start()
            first, deadline = -1, time.monotonic() + self.hedge_after
            for _ in self._servers:
                try:
                    i, status = answers.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if status == 200:
                    self._current = i
                    return
                if status and (first < 0 or i < first):
                    first = i
            if first >= 0:
                self._current = first

    # Requests.

    def _connection(self, timeout: float, i: Optional[int] = None) -> http.client.HTTPConnection:
        """This thread's kept-alive connection to server i (the one the client talks to now)."""
        i = self._current if i is None else i
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
            self._local.used = {}
        c = conns.get(i)
        if c is not None and time.monotonic() - self._local.used.get(i, 0.0) > IDLE_REUSE_MAX:
            self._drop(i)
            c = None
        if c is None:
            c = conns[i] = self._new_connection(i, timeout)
        c.timeout = timeout
        if c.sock is not None:
            c.sock.settimeout(timeout)
        return c

    def _drop(self, i: int) -> None:
        c = getattr(self._local, "conns", {}).pop(i, None)
        if c is not None:
            c.close()

    def request(self, method: str, path: str, body: Any = None, *, raw: Optional[bytes] = None,
                content_type: str = "application/json", headers: Optional[Dict[str, str]] = None,
                timeout: Optional[float] = None, token: Optional[str] = None,
                again: bool = False, hedge: bool = True) -> Tuple[int, Any]:
        """Sends one request and returns (status, decoded JSON answer or None). ``again`` says
        the request does the same thing twice (a worker's numbered event, a result, a poll), so
        it may be sent again when a kept-alive connection turns out closed, and to another
        server, as may the requests ``repeatable`` names. ``hedge`` False keeps a request safe
        to repeat on one server at a time (a long poll, which waits on purpose)."""
        data = raw
        if data is None and body is not None:
            data = _ijson.dumps(body).encode()
        h = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if data is not None:
            h["Content-Type"] = content_type
        tok = self.token if token is None else token
        if tok:
            h["Authorization"] = "Bearer " + tok
        if headers:
            h.update(headers)
        safe = again or repeatable(method, path, body, headers)
        timeout = timeout or self.timeout

        def call(i: int, t: Optional[_Try]) -> Tuple[int, bytes]:
            resp, payload = self._send(i, method, path, data, h, timeout, safe, t)
            self._heard(i)
            check_status(method, path, resp, payload)
            return resp.status, payload

        if len(self._servers) == 1:
            status, payload = call(0, None)
        else:
            self.find_leader(safe)
            status, payload = self._race(call, safe, hedge and safe and self.hedge_after > 0)
        if status == 204 or not payload:
            return status, None
        try:
            return status, json.loads(payload)
        except ValueError as e:
            raise TetherError("INVALID_ANSWER", f"{method} {path}: the answer is not JSON: {e}", status) from e

    def _race(self, call: Callable[[int, Optional[_Try]], Any], safe: bool, hedged: bool) -> Any:
        """Sends a request to the servers by the rules above, starting with the one the client
        talks to, and returns the first answer that is not a failover's. Hedged, each try runs on
        a thread of the client's pool, and those left when one answers are cut short."""
        r = Race(self, safe, hedged)
        results: "queue.Queue[Tuple[int, Any, Optional[TetherError]]]" = queue.Queue()
        tries: Dict[int, _Try] = {}

        def launch(i: int) -> None:
            r.launched(i)
            if not hedged:
                try:
                    results.put((i, call(i, None), None))
                except TetherError as e:
                    results.put((i, None, e))
                return
            t = tries[i] = _Try()

            def run() -> None:
                try:
                    results.put((i, call(i, t), None))
                except TetherError as e:
                    results.put((i, None, e))
                except _Abandoned:
                    results.put((i, None, TetherError(UNREACHABLE, "abandoned")))
            self._pool.submit(run)

        try:
            launch(self._current)
            while True:
                at = r.wake()
                try:
                    i, value, err = results.get(timeout=None if at is None else max(0.0, at - time.monotonic()))
                except queue.Empty:
                    nxt = r.due_now()
                    if nxt >= 0:
                        launch(nxt)
                    continue
                tries.pop(i, None)
                if err is None:
                    r.answered(i)
                    return value
                if not _never_taken(err) and not (safe and _moves_on(err)):
                    r.refused(i, moved=_moves_on(err))
                    raise err
                nxt = r.failed(i, err.code in ("STANDBY", "NOT_READY"), _leader(err), isinstance(err, _Silent))
                if nxt >= 0:
                    launch(nxt)
                elif r.over():
                    raise err
        finally:
            for t in tries.values():
                t.abandon()

    def _send(self, i: int, method: str, path: str, data: Optional[bytes], headers: Dict[str, str],
              timeout: float, again: bool, t: Optional[_Try] = None) -> Tuple[http.client.HTTPResponse, bytes]:
        path = self._servers[i].prefix + path
        # A kept-alive connection the server closed meanwhile fails at once: one more try on a
        # fresh connection, for a request that may be sent twice.
        for fresh in (False, True):
            conn = self._connection(timeout, i)
            if t is not None:
                t.conn = conn
                if t.abandoned:
                    raise _Abandoned()
            reused = conn.sock is not None
            try:
                if not reused:
                    try:
                        conn.timeout = min(timeout, CONNECT_TIMEOUT)
                        conn.connect()
                    except ssl.SSLError:
                        raise
                    except OSError as e:
                        self._drop(i)
                        raise _Unreached(UNREACHABLE, f"{method} {path}: {e}") from e
                    conn.timeout = timeout
                    conn.sock.settimeout(timeout)
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                self._local.used[i] = time.monotonic()
                if resp.getheader("Connection", "").lower() == "close":
                    self._drop(i)
                return resp, payload
            except ssl.SSLError as e:
                self._drop(i)
                raise TetherError(TLS_ERROR, f"{method} {path}: {e}") from e
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop(i)
                if reused and not fresh and again and not self.aborted() and not (t and t.abandoned):
                    continue
                raise TetherError(UNREACHABLE, f"{method} {path}: {e}") from e
            except TimeoutError as e:
                self._drop(i)
                raise _Silent(UNREACHABLE, f"{method} {path}: no answer in {timeout:.0f} s") from e
            except (OSError, http.client.HTTPException) as e:
                self._drop(i)
                raise TetherError(UNREACHABLE, f"{method} {path}: {e}") from e
            except BaseException:
                # Anything else (a header http.client refuses, an interrupt) may leave the
                # connection between a request and its answer: the next request gets a new one.
                self._drop(i)
                raise
        raise AssertionError("unreachable")

    def aborted(self) -> bool:
        """Whether requests in flight were cut short on purpose (a worker that stops)."""
        return False

    def _new_connection(self, i: int, timeout: float) -> http.client.HTTPConnection:
        s = self._servers[i]
        if s.scheme == "https":
            return http.client.HTTPSConnection(s.host, s.port, timeout=timeout,
                                               context=self._ssl or ssl.create_default_context())
        return http.client.HTTPConnection(s.host, s.port, timeout=timeout)

    def stream(self, path: str, headers: Dict[str, str], timeout: float) -> Iterator[str]:
        """GETs path on a connection of its own, from the server the client talks to, and yields
        the answer's lines (an SSE stream). Its answer has to begin within the request timeout
        (at most 10 s); then a line has to come every ``timeout``. A server that does not answer,
        is a standby or starting is left: the client moves on, and the caller resumes there."""
        several = len(self._servers) > 1
        if several:
            self.find_leader()
        i = self._current
        conn = self._new_connection(i, min(self.timeout, 10.0, timeout))
        h = {"User-Agent": USER_AGENT}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(headers)
        try:
            try:
                conn.request("GET", self._servers[i].prefix + path, headers=h)
                resp = conn.getresponse()
                self._heard(i)
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
            except ssl.SSLError as e:
                raise TetherError(TLS_ERROR, f"GET {path}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                self.failover(i)
                raise TetherError(UNREACHABLE, f"GET {path}: {e}") from e
            try:
                check_status("GET", path, resp, resp.read() if resp.status >= 300 else b"")
            except TetherError as e:
                if several and e.code in ("STANDBY", "NOT_READY"):
                    self.failover(i, _leader(e))
                    raise TetherError(UNREACHABLE, f"GET {path}: {e}") from e
                raise
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    self.failover(i)
                    raise TetherError(UNREACHABLE, f"GET {path}: {e}") from e
                if not line:
                    return
                yield line.decode("utf-8").rstrip("\r\n")
        finally:
            conn.close()


def _backoff(n: int, lo: float, hi: float) -> float:
    """Exponential from lo, capped at hi, jittered over its upper half."""
    d = hi if n >= 30 else min(hi, lo * (1 << (n - 1)))
    return d / 2 + random.uniform(0, d / 2)


def check_status(method: str, path: str, resp: http.client.HTTPResponse, payload: bytes) -> None:
    """Raises the TetherError of an answer that is not a success: an error, or a redirect (a
    proxy sending http to https, say), which is not the answer asked for."""
    if resp.status >= 400:
        raise error_of(resp.status, payload, resp.getheader("X-Request-Id") or "")
    if resp.status >= 300:
        where = resp.getheader("Location") or "nowhere"
        raise TetherError(f"HTTP_{resp.status}", f"{method} {path} was redirected to {where}; use that URL", resp.status)


def error_of(status: int, payload: bytes, request_id: str) -> TetherError:
    """The TetherError of an error answer: tether's code, or HTTP_<status> for another's."""
    try:
        e = json.loads(payload)["error"]
        code = e["code"]
        if not isinstance(code, str) or not code:
            raise ValueError
    except (ValueError, KeyError, TypeError):
        return TetherError(f"HTTP_{status}", payload.decode("utf-8", "replace").strip()[:2000], status,
                           request_id=request_id)
    return TetherError(code, e.get("message", ""), status, e.get("details") or {},
                       e.get("request_id") or request_id)


def quote(s: str) -> str:
    """An id as one path segment."""
    return urllib.parse.quote(s, safe="")
