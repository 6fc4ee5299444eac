"""The worker: runs a handler for every job the server leases to it.

Jobs arrive over WebSocket when the ``websockets`` package is installed and the server's
WebSocket endpoint can be reached, and over HTTP long-polling otherwise (the standard library
alone), as the Go runner chooses. The rules are the Go runner's:

- a lease is heartbeated as often as its lease_ttl needs, and a job whose cancel the server
  asks for sees ``ctx.cancelled``;
- a result is kept until the server has it or refused it for good: an answer that may pass
  (none, or a code the server's table marks retryable) sends it again with backoff while its
  lease may still be valid, and once more after; a completion refused for what it is (too
  large, not valid, a bad signature) is replaced by the failure that says so;
- a clean stop (``stop()``, SIGTERM, Ctrl-C) takes no new job, lets the running ones finish
  for ``grace`` seconds, then tells them to stop and gives their jobs back with no attempt
  spent, whatever their handlers return once told;
- a job given back untried (``raise tether.Release``) backs the worker off: it takes no new job
  for 1 s, twice as long each time in a row (up to 5 minutes), until a job completes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as _dt
import itertools
import json
import logging
import os
import random
import signal
import socket
import ssl
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _codes, _ijson, _otlp, signing
from ._http import HEDGE_AFTER, HTTP, Race, error_of, quote
from .errors import UNREACHABLE, Cancelled, Failure, Release, TetherError, retryable

try:  # websockets >= 13: the new asyncio client
    from websockets.asyncio.client import connect as _ws_connect
    _WS_HEADERS = "additional_headers"
except ImportError:  # pragma: no cover - depends on what is installed
    try:  # websockets 10-12 (Debian bookworm has 10.4)
        from websockets import connect as _ws_connect
        _WS_HEADERS = "extra_headers"
    except ImportError:
        _ws_connect = None
        _WS_HEADERS = ""

log = logging.getLogger("tether.worker")

Handler = Callable[["JobContext"], Any]

#: How long a long poll asks the server to wait for a job.
POLL_WAIT = 20.0
#: How long a WebSocket handshake, and then the server's welcome, may take.
HANDSHAKE_TIMEOUT = 10.0
#: How long a fallback to long-polling lasts before WebSocket is tried again.
LONG_POLL_FOR = 300.0
#: A lease's TTL when its assignment does not say (the server's default).
LEASE_TTL_DEFAULT = 30.0
#: Bounds of the backoff before a result is sent again, and before reconnecting.
RESEND_MIN, RESEND_MAX = 0.2, 10.0
#: The largest output the server takes, in bytes of JSON.
OUTPUT_BYTES_MAX = 1 << 20
#: What the server takes of a registration (actors.CapacityMax, actors.WorkerQueuesMax).
CAPACITY_MAX, QUEUES_MAX = 1000, 32

RELEASE_WORKER_STOPPING = "worker_stopping"
#: Bounds of the pause after a job given back untried (tether.Release), as the Go runner's.
PAUSE_MIN, PAUSE_MAX = 1.0, 300.0
#: How long, after a stop's grace, a handler told to stop has to return before its job is given back.
STOP_WAIT = 5.0

#: The code of a worker that cannot work as configured (a key that does not match its registration).
MISCONFIGURED = "WORKER_MISCONFIGURED"

# A completion refused for what it is: the failure that replaces it (code, retryable).
_REFUSALS = {
    "PAYLOAD_TOO_LARGE": ("output_too_large", False),
    "INVALID_ARGUMENT": ("output_refused", False),
    "INVALID_JSON": ("output_refused", False),
    # The worker's key, not the job, is at fault: another worker may run it.
    "SIGNATURE_INVALID": ("signature_invalid", True),
}


def backoff(n: int, lo: float, hi: float) -> float:
    """The delay before try n (from 1): exponential from lo, capped at hi, jittered over its
    upper half so that many workers do not come back in step."""
    d = hi if n >= 30 else min(hi, lo * (1 << (n - 1)))
    return d / 2 + random.uniform(0, d / 2)


def _parse_time(s: Optional[str]) -> Optional[_dt.datetime]:
    if not s:
        return None
    s = s.replace("Z", "+00:00")
    if "." in s:  # Python < 3.11 takes at most 6 digits of a second
        head, rest = s.split(".", 1)
        digits = rest[:len(rest) - len(rest.lstrip("0123456789"))]
        s = head + "." + digits[:6].ljust(6, "0") + rest[len(digits):]
    return _dt.datetime.fromisoformat(s)


class _StopFlag:
    """threading.Event's set, is_set and wait, but safe to set from a signal handler. A handler
    runs on the main thread between two of its bytecodes; threading.Event guards its flag with a
    plain Lock, so a SIGTERM that lands while the main thread is inside the Event's wait, holding
    that Lock, made set() wait for it for ever: a worker that never stopped (seen in CI, a second
    SIGTERM right after `kill $worker`). Here the lock is reentrant, and a wait looks at the flag
    at least every WAIT_SLICE seconds, so a set() that lands between the wait's look at the flag
    and its sleep is seen within that slice."""

    WAIT_SLICE = 0.25

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._cond:
            self._flag = True
            self._cond.notify_all()

    def wait(self, timeout: Optional[float] = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._flag:
                left = self.WAIT_SLICE if deadline is None else min(self.WAIT_SLICE, deadline - time.monotonic())
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._flag


class JobContext:
    """A job leased to the worker, as its handler sees it."""

    def __init__(self, worker: "Worker", a: Dict[str, Any]):
        self._worker = worker
        self.id: str = a["job_id"]
        self.lease_id: str = a["lease_id"]
        self.queue: str = a.get("queue", "")
        self.type: str = a.get("job_type", "")
        self.payload: Any = a.get("payload")
        self.attempt: int = a.get("attempt", 0)
        self.lease_expires_at: Optional[_dt.datetime] = _parse_time(a.get("lease_expires_at"))
        #: The W3C trace context the job continues ("" if none): the run's span when the worker
        #: exports traces (``otel_endpoint``), else what the assignment named (the attempt's span
        #: when the server traces). The parent of the handler's own spans (with OpenTelemetry:
        #: ``TraceContextTextMapPropagator().extract({"traceparent": ctx.traceparent})``).
        self.traceparent: str = a.get("traceparent", "")
        self._nonce: str = a.get("nonce", "")
        now = time.monotonic()
        ttl = LEASE_TTL_DEFAULT
        if self.lease_expires_at is not None:
            left = (self.lease_expires_at - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
            if left > 0:
                ttl = left
        self._ttl = ttl
        self._heard = now  # when the server last confirmed the lease
        self._heartbeat = float(a.get("heartbeat_seconds") or 0)
        self._events = 0
        self._events_lock = threading.Lock()
        self._cancel = threading.Event()
        self._why = ""  # "cancelled" (by the server), "lost" (the lease), "stopping" (the worker)
        # Under the worker's lock: the handler returned and its result is being sent; or the
        # worker gave the job back while the handler ran on past the stop (its result is dropped).
        self._reporting = False
        self._abandoned = False

    @property
    def cancelled(self) -> bool:
        """Set when the job should stop: the server asked to cancel it, its lease was lost, or
        the worker is stopping and its grace is over. A handler checks it (or waits on
        :meth:`wait_cancelled`) and returns or raises soon after. Whatever it returns then,
        the job does not succeed: a cancelled job ends cancelled (the server keeps no output
        sent after the cancel), and a job stopped by the worker's stop is given back with no
        attempt spent."""
        return self._cancel.is_set()

    @property
    def cancel_reason(self) -> str:
        return self._why

    def wait_cancelled(self, timeout: Optional[float] = None) -> bool:
        """Waits until the job should stop (see :attr:`cancelled`) or timeout; says which."""
        return self._cancel.wait(timeout)

    def check_cancelled(self) -> None:
        """Raises :class:`tether.Cancelled` if the job should stop: the attempt then ends as
        the server asked (a cancelled job is acknowledged, a stopping worker gives it back), as
        it does when the handler returns a value instead."""
        if self._cancel.is_set():
            raise Cancelled(self._why)

    def _stop(self, why: str) -> None:
        if not self._why:
            self._why = why
        self._cancel.set()

    def event(self, event_type: str, data: Any = None) -> int:
        """Appends an event to the job's stream, where clients watching it see it, and returns
        its number there. An event sent again after a lost answer is written once."""
        _check_depth(data, "the event's data")
        _encode(data)  # a value that is not JSON raises TypeError or ValueError here, not on the way
        # One at a time, in their numbers' order: the server takes a number at or below the
        # highest it has for the lease as a repeat, so events from several threads must not
        # overtake each other on their way.
        with self._events_lock:
            self._events += 1
            body = {"lease_id": self.lease_id, "event_type": event_type, "data": data, "seq": self._events}
            tries = 0
            while True:
                try:
                    return int(self._worker._request("event", self.id, body).get("number", 0))
                except TetherError as e:
                    tries += 1
                    if not e.retryable or tries > 5 or self._why == "lost":
                        raise
                    time.sleep(backoff(tries, RESEND_MIN, RESEND_MAX))

    def progress(self, data: Any) -> int:
        """Reports progress (any JSON value) as a ``progress`` event."""
        return self.event("progress", data)

    def log(self, line: str) -> int:
        """Appends a log line as a ``log`` event."""
        return self.event("log", str(line))


class Worker:
    """Runs handlers for the jobs of ``queues``, up to ``capacity`` at once.

    Credentials, in order: ``token``; the token in ``token_file``; else the worker registers
    (with ``enroll_token``, none under ``--auth none``) and keeps its token in ``token_file``
    when given. ``signer`` (a :class:`tether.signing.Signer`) signs every completion and is
    registered as the worker's public key. ``transport`` is ``auto``, ``websocket`` or
    ``longpoll``. With ``results_dir`` each result is kept on disk until the server has it,
    so that a worker that dies first sends it when it starts again on the same directory
    (with the same credentials); without it, results wait in memory only.

    ``url`` may name the several servers of a replicated log, comma-separated (or a sequence):
    the worker registers with and connects to the leader, and after a failover reconnects to the
    new one as soon as it leads, past a server that is away or silent (paused), as the client
    does (``hedge_after``); a server that leaves a heartbeat unanswered is left.

    With ``otel_endpoint`` (an OTLP/HTTP collector's URL, e.g. ``http://localhost:4318``) or the
    ``OTEL_EXPORTER_OTLP_*`` variables, the worker exports a ``tether.run`` span of each job's
    run under the trace its assignment names, and ``ctx.traceparent`` names that span, so that
    the handler's own spans nest under it.
    """

    def __init__(self, url: Union[str, Sequence[str]] = "", *, token: str = "", token_file: str = "",
                 enroll_token: str = "", queues: Sequence[str] = ("default",), capacity: int = 1,
                 name: str = "", signer: Optional[signing.Signer] = None, transport: str = "auto",
                 grace: float = 10.0, labels: Optional[Dict[str, str]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None, results_dir: str = "",
                 otel_endpoint: str = "", hedge_after: float = HEDGE_AFTER):
        # Settings are checked here, where the mistake is, as `tether worker` checks its flags,
        # rather than by the server once run() starts, or never (a string for queues is a list
        # of its letters to Python).
        if isinstance(capacity, bool) or not isinstance(capacity, int) or not 1 <= capacity <= CAPACITY_MAX:
            raise ValueError(f"tether: capacity must be a whole number of 1..{CAPACITY_MAX}, not {capacity!r}")
        original = queues
        queues = [] if isinstance(queues, (str, bytes)) else list(queues)
        if not queues or not all(isinstance(q, str) and q for q in queues):
            raise ValueError(f"tether: queues must be a list of queue names, as in queues=['images'], not {original!r}")
        if len(queues) > QUEUES_MAX:
            raise ValueError(f"tether: a worker serves 1..{QUEUES_MAX} queues, not {len(queues)}")
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < float("inf"):
            raise ValueError(f"tether: grace must be a number of seconds, 0 or more, not {grace!r}")
        if transport not in ("auto", "websocket", "longpoll"):
            raise ValueError("tether: transport must be auto, websocket or longpoll")
        url = url or os.environ.get("TETHER_SERVER", "http://127.0.0.1:8080")
        self._http = HTTP(url, ssl_context=ssl_context, hedge_after=hedge_after)
        self._http.aborted = lambda: self._stopping.is_set()
        self.queues = list(queues)
        self.capacity = capacity
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.signer = signer
        self.transport = transport
        self.grace = grace
        self.labels = labels
        self._token_file = token_file
        self._enroll_token = enroll_token or os.environ.get("TETHER_ENROLL_TOKEN", "")
        self._http.token = token or os.environ.get("TETHER_WORKER_TOKEN", "") or self._read_token()
        self.worker_id = ""
        self._handlers: Dict[str, Handler] = {}
        self._lock = threading.Condition()
        self._active: Dict[str, JobContext] = {}  # by lease id
        self._stopping = _StopFlag()
        self._poll_conn: Any = None
        self._ws: Optional[_WSLink] = None  # the WebSocket link while one is up
        self._renew_at: Optional[float] = None  # when to renew the worker token (monotonic)
        self._results = _ResultStore(results_dir)
        # After a job given back untried: no credit until _paused_until (monotonic); _pauses
        # counts them in a row, _owed the credit held back meanwhile (WebSocket).
        self._paused_until = 0.0
        self._pauses = 0
        self._owed = 0
        traces = _otlp.endpoint_from_env(otel_endpoint)
        self._otlp = _otlp.Exporter(traces) if traces else None
        #: The transport jobs come over now: "websocket" or "longpoll" ("" before run()).
        self.connected_transport = ""

    # Handlers.

    def handler(self, job_type: str = "*") -> Callable[[Handler], Handler]:
        """A decorator: ``@worker.handler("resize")`` runs the function for jobs of that type;
        ``"*"`` for any type without a handler of its own."""
        def register(fn: Handler) -> Handler:
            self._handlers[job_type] = fn
            return fn
        return register

    def handle(self, job_type: str, fn: Handler) -> None:
        self._handlers[job_type] = fn

    # Credentials.

    def _read_token(self) -> str:
        if self._token_file and os.path.exists(self._token_file):
            with open(self._token_file) as f:
                return f.read().strip()
        return ""

    def register(self) -> str:
        """Registers the worker (with the enroll token) and returns its worker token. A server
        that cannot be reached or is not ready is tried again, with backoff, until it answers
        or the worker stops; token_file's directory is checked first, so that no registration
        is spent on a token that could not be kept."""
        if self._token_file:
            _check_writable(self._token_file)
        body: Dict[str, Any] = {"name": self.name, "queues": self.queues, "capacity": self.capacity}
        if self.signer is not None:
            body["public_key"] = self.signer.public_key
        if self.labels:
            body["labels"] = self.labels
        reg = self._retrying("registering", lambda: self._http.request(
            "POST", "/v1/workers/register", body, token=self._enroll_token)[1])
        self._http.token, self.worker_id = reg["worker_token"], reg["worker_id"]
        self._keep_token()
        return self._http.token

    def _retrying(self, what: str, call: Callable[[], Any]) -> Any:
        """Calls call until it does not fail with a retryable error (a server down, restarting
        or not ready), with backoff; raises the others, and the last one if the worker stops."""
        failures = 0
        while True:
            try:
                return call()
            except TetherError as e:
                if not e.retryable or self._stopping.is_set():
                    raise
                failures += 1
                log.warning("%s failed (%s); trying again", what, e)
                if self._stopping.wait(backoff(failures, 0.5, 30.0)):
                    raise

    # Running.

    def run(self) -> None:
        """Takes and runs jobs until :meth:`stop` (or SIGTERM, or Ctrl-C in the main thread),
        then stops cleanly. Raises TetherError when the server refuses the worker for good
        (revoked, an expired token)."""
        if not self._handlers:
            raise ValueError("tether: the worker has no handler")
        if self.transport == "websocket" and _ws_connect is None:
            raise ValueError("tether: transport websocket needs the websockets package (pip install websockets, or apt install python3-websockets)")
        restore = self._catch_signals()
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="tether-heartbeat", daemon=True)
        heartbeat.start()
        websocket = self.transport != "longpoll" and _ws_connect is not None
        try:
            if not self._http.token:
                self.register()
            self._resume()
            while not self._stopping.is_set():
                if websocket:
                    self._ws_loop()  # returns when the handshake is refused: long-poll a while
                if not self._stopping.is_set():
                    self._poll_loop(time.monotonic() + LONG_POLL_FOR if websocket else None)
        except TetherError:
            if not self._stopping.is_set():  # a stop while the server was away is still a stop
                raise
        finally:
            self._finish()
            if self._otlp is not None:
                self._otlp.shutdown()
            for sig, old in restore:
                signal.signal(sig, old)

    def stop(self) -> None:
        """Stops taking jobs; run() returns once the running ones have finished or been given
        back. Safe from any thread and from a signal handler."""
        self._stopping.set()
        conn = self._poll_conn
        if conn is not None and conn.sock is not None:
            try:  # a poll waiting for a job ends now; what it would have brought goes back
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        ws = self._ws
        if ws is not None:
            ws.close()
        with self._lock:
            self._lock.notify_all()

    def _catch_signals(self) -> List[Any]:
        if threading.current_thread() is not threading.main_thread():
            return []
        restore = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            restore.append((sig, signal.signal(sig, lambda *_: self.stop())))
        return restore

    def _poll_loop(self, until: Optional[float]) -> None:
        """Long-polls for jobs until the worker stops, or until ``until`` (monotonic)."""
        # The first request is a heartbeat of the leases held: it checks the token and the
        # key, and tells which leases a reconnect lost.
        with self._lock:
            leases = list(self._active.values())
        sent = time.monotonic()
        hello = self._retrying("connecting", lambda: self._http.request(
            "POST", "/v1/worker/heartbeat", {"leases": [c.lease_id for c in leases]}, again=True)[1] or {})
        self._check_key(hello.get("public_key", ""))
        self._heartbeat_answered(leases, hello, sent)
        self.connected_transport = "longpoll"
        failures = 0
        while not self._stopping.is_set() and (until is None or time.monotonic() < until):
            with self._lock:
                while not self._stopping.is_set() and (len(self._active) >= self.capacity or self._paused()):
                    self._lock.wait(max(0.01, self._paused_until - time.monotonic()) if self._paused() else None)
                free = self.capacity - len(self._active)
            if self._stopping.is_set():
                break
            try:
                self._poll_conn = self._http._connection(POLL_WAIT + 30)
                _, answer = self._http.request("POST", "/v1/worker/lease",
                                               {"max": free, "wait_seconds": POLL_WAIT},
                                               timeout=POLL_WAIT + 30, again=True, hedge=False)
                failures = 0
            except TetherError as e:
                if self._stopping.is_set():
                    break
                if not e.retryable:
                    raise
                failures += 1
                log.warning("polling for jobs failed (%s); trying again", e)
                self._stopping.wait(backoff(failures, 0.5, 30.0))
                continue
            finally:
                self._poll_conn = None
            for a in (answer or {}).get("assignments") or []:
                self._start(a)

    def _ws_loop(self) -> None:
        """Runs WebSocket sessions until the worker stops. Returns at once to fall back to
        long-polling when transport is auto and the server or a proxy refuses the WebSocket
        handshake itself while plain HTTP works."""
        failures = 0
        while not self._stopping.is_set():
            try:
                connected = asyncio.run(self._ws_session())
            except _HandshakeRefused as e:
                if self.transport == "auto":
                    log.warning("the WebSocket handshake was refused (%s); long-polling instead", e)
                    return
                raise TetherError("BAD_HANDSHAKE", str(e)) from e
            except TetherError as e:
                if not e.retryable:
                    if e.status in (401, 403) and e.code.startswith("HTTP_"):
                        # The handshake's refusal has no body here: ask over HTTP for the
                        # reason (WORKER_REVOKED, TOKEN_EXPIRED, ...), which it raises.
                        self._http.request("POST", "/v1/worker/heartbeat", {"leases": []})
                    raise
                connected = False
                if not self._stopping.is_set():
                    log.warning("the WebSocket session failed: %s", e)
            except Exception as e:  # noqa: BLE001 - a link that broke; reconnect
                connected = False
                if not self._stopping.is_set():
                    log.warning("the WebSocket session ended: %s", e)
            failures = 0 if connected else failures + 1
            if not self._stopping.is_set():
                self._stopping.wait(backoff(max(failures, 1), 0.5, 30.0))

    async def _ws_session(self) -> bool:
        """One WebSocket session: hello, welcome, credit, then assignments, cancels and acks
        until the connection ends. Returns whether it got as far as the welcome."""
        conn, server = await self._ws_handshake()
        loop = asyncio.get_running_loop()
        link = _WSLink(self, loop, conn, server)
        try:
            await conn.send(json.dumps({"type": "hello", "capacity": self.capacity}))
            try:
                welcome = json.loads(await asyncio.wait_for(conn.recv(), HANDSHAKE_TIMEOUT))
            except asyncio.TimeoutError as e:  # upgraded, then silent: left like a server away
                self._http.failover(server)
                raise TetherError(UNREACHABLE, f"no welcome in {HANDSHAKE_TIMEOUT:.0f} s") from e
            if welcome.get("type") != "welcome":
                raise TetherError("BAD_HANDSHAKE", f"the server answered hello with {welcome.get('type')!r}")
            self._check_key(welcome.get("public_key", ""))
            self._note_token(welcome)
            self.worker_id = welcome.get("worker_id", self.worker_id)
            with self._lock:
                self._ws, self.connected_transport = link, "websocket"
                free = self.capacity - len(self._active)
                if self._paused():  # granted when the pause is over (_pause_over)
                    self._owed, free = free, 0
            if self._stopping.is_set():
                return True
            if free > 0:
                await link.send({"type": "credit", "n": free})
            beat = asyncio.ensure_future(link.heartbeats(float(welcome.get("heartbeat_seconds") or 10)))
            try:
                async for msg in conn:
                    link.receive(json.loads(msg))
            finally:
                beat.cancel()
            return True
        finally:
            self._ws = None
            link.down()
            await conn.close()

    async def _ws_handshake(self) -> Tuple[Any, int]:
        """The WebSocket handshake, made as a request safe to repeat is sent (a handshake has no
        effect; the rules of ``_http``): to the server the worker talks to, after hedge_after
        to the next too, and to the others at once when one is away, a standby or starting;
        those that answered so are asked again while another is awaited. The first to upgrade
        wins; the others are closed. Returns the connection and its server's index."""
        h = self._http
        h.find_leader()  # before the session: nothing else runs on this loop yet
        kw = {_WS_HEADERS: {"Authorization": "Bearer " + h.token, "User-Agent": "tether-python/0.1"},
              "max_size": 64 << 20, "open_timeout": HANDSHAKE_TIMEOUT}

        async def dial(i: int) -> Any:
            s = h._servers[i]
            return await _ws_connect(s.url.replace("http", "ws", 1) + s.prefix + "/v1/worker/connect", **kw)

        def close_late(task: "asyncio.Future[Any]") -> None:  # a loser that upgraded after all
            if not task.cancelled() and task.exception() is None:
                asyncio.ensure_future(task.result().close())

        # For a handshake's time, the servers that stand by are asked again every 100 ms, so
        # that the worker is on the new leader as soon as it leads.
        r = Race(h, safe=True, hedged=len(h._servers) > 1, retry_for=HANDSHAKE_TIMEOUT)
        pending: Dict["asyncio.Future[Any]", int] = {}

        def launch(i: int) -> None:
            r.launched(i)
            pending[asyncio.ensure_future(dial(i))] = i

        launch(h._current)
        try:
            while True:
                at = r.wake()
                timeout = None if at is None else max(0.0, at - time.monotonic())
                if pending:
                    done, _ = await asyncio.wait(list(pending), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                else:  # none awaited: wait until one is due again
                    await asyncio.sleep(timeout or 0.0)
                    done = set()
                if not done:
                    i = r.due_now()
                    if i >= 0:
                        launch(i)
                    continue
                for task in done:
                    i = pending.pop(task)
                    exc = task.exception()
                    if exc is None:
                        r.answered(i)
                        for other in done - {task}:
                            pending.pop(other, None)
                            close_late(other)
                        return task.result(), i
                    err = _classify_handshake(exc)
                    if not _handshake_moves_on(err):
                        r.refused(i, moved=False)
                        raise err
                    i = r.failed(i, getattr(err, "status", 0) == 503, _handshake_leader(exc, err),
                                 isinstance(exc, (asyncio.TimeoutError, TimeoutError)))
                    if i >= 0:
                        launch(i)
                    elif r.over():
                        raise err
        finally:
            for task in pending:
                task.cancel()
                task.add_done_callback(close_late)

    def _note_token(self, answer: Dict[str, Any]) -> None:
        """Notes when the server wants the worker token renewed (welcome, heartbeat answers)."""
        renew = answer.get("token_renew_seconds")
        if renew is not None:
            self._renew_at = time.monotonic() + float(renew)

    def _renew_token(self) -> None:
        """Renews the worker token when it is due; the new one is used from then on, for
        requests and reconnections alike, and kept in token_file."""
        if self._renew_at is None or time.monotonic() < self._renew_at:
            return
        try:
            renewal = self._http.request("POST", "/v1/worker/token")[1] or {}
        except TetherError as e:
            if not e.retryable:
                log.error("renewing the worker token failed: %s", e)
            self._renew_at = time.monotonic() + 60  # and again later; the old token still works
            return
        self._http.token = renewal["worker_token"]
        # Renew again at half of what is left (a heartbeat's answer may say sooner).
        expires = _parse_time(renewal.get("expires_at"))
        left = (expires - _dt.datetime.now(_dt.timezone.utc)).total_seconds() if expires else 3600.0
        self._renew_at = time.monotonic() + max(1.0, left / 2)
        try:
            self._keep_token()
        except OSError as e:  # the new token works; only a restart would miss it
            log.error("the renewed worker token could not be written to %s: %s", self._token_file, e)
        log.info("the worker token was renewed; it expires at %s", renewal.get("expires_at"))

    def _keep_token(self) -> None:
        """Writes the token to token_file whole and readable by its owner alone: a new file
        renamed over the old, so that neither a crash nor an old file's mode exposes it."""
        if not self._token_file:
            return
        tmp = f"{self._token_file}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(self._http.token + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._token_file)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def _check_key(self, registered: str) -> None:
        """The key the server holds for this worker against the worker's own: a worker whose
        results would all be refused says so and stops instead."""
        mine = self.signer.public_key if self.signer is not None else ""
        if registered == "" and mine:
            log.warning("this worker registered no public key: the server does not check the results' signatures")
        elif registered and not mine:
            raise TetherError(MISCONFIGURED, f"this worker registered public key {registered}, so the server takes only results signed with its private key; give it the key (signer=...)")
        elif registered and registered != mine:
            raise TetherError(MISCONFIGURED, f"this worker's private key is not the one whose public key it registered ({registered}); give it that key, or register anew")

    def _start(self, a: Dict[str, Any]) -> None:
        """Runs an assignment on a thread of its own (never on the caller's, which may be the
        WebSocket link's)."""
        ctx = JobContext(self, a)
        with self._lock:
            self._active[ctx.lease_id] = ctx
        threading.Thread(target=self._run_job, args=(ctx,), name=f"tether-job-{ctx.id}", daemon=True).start()

    def _run_job(self, ctx: JobContext) -> None:
        if self._stopping.is_set():  # arrived as the worker stops: give it back untried
            with self._lock:
                ctx._reporting = True
            self._report(ctx, self._release_body(ctx, "the worker stopped before the job started"), "release")
            return
        fn = self._handlers.get(ctx.type) or self._handlers.get("*")
        out: Any = None
        err: Optional[BaseException] = None
        span = self._run_span(ctx)
        if fn is None:
            err = Failure("no_handler", f"this worker has no handler for job type {ctx.type!r}", retryable=True)
        else:
            try:
                out = fn(ctx)
            except BaseException as e:  # noqa: BLE001 - a handler's any failure fails the attempt
                err = e
        if span is not None:
            self._end_run_span(span, ctx, err)
        # The result follows from whether the job was told to stop before its handler
        # returned: the stop (_finish) tells only the jobs not reporting, under the same lock.
        with self._lock:
            abandoned = ctx._abandoned
            ctx._reporting = not abandoned
            why = ctx._why
        if abandoned:  # the worker stopped and gave the job back already
            log.warning("job %s: the handler returned after the worker gave the job back; its result is dropped", ctx.id)
            return
        if why == "lost":
            log.warning("the lease of job %s was lost; its result is dropped", ctx.id)
            self._done(ctx)
            return
        if why == "stopping":
            # Told to stop once the stop's grace ran out: the job was cut short, whatever the
            # handler made of it (an output, an error), and goes back unspent.
            body, kind = self._release_body(ctx, "the worker stopped before the job finished"), "release"
        elif err is None:
            body, kind = self._completion(ctx, out)
        elif isinstance(err, Release):
            body, kind = {"lease_id": ctx.lease_id, "reason": err.reason, "message": err.message}, "release"
            self._pause(err)
        else:
            body, kind = self._failure(ctx, err), "fail"
        if kind == "complete":
            with self._lock:
                self._pauses = 0
        self._report(ctx, body, kind)

    def _completion(self, ctx: JobContext, out: Any):
        try:
            _check_depth(out, "the output")
            _ijson.dumps(out)  # a number past a double's range, a lone surrogate
            canonical = signing.canonical_json(out)
        except (TypeError, ValueError, RecursionError) as e:
            # Not JSON: it would be so at every attempt, as the Go runner judges it.
            return self._failure(ctx, Failure("bad_output", f"the output is not JSON: {e}", retryable=False)), "fail"
        if len(canonical) > OUTPUT_BYTES_MAX:
            return self._failure(ctx, Failure("output_too_large", f"the output is {len(canonical)} bytes of JSON; the limit is {OUTPUT_BYTES_MAX}", retryable=False)), "fail"
        digest = signing.output_hash(out)
        body = {"lease_id": ctx.lease_id, "nonce": ctx._nonce, "output": out, "output_hash": digest}
        if self.signer is not None:
            body["signature"] = self.signer.sign_completion(ctx.id, ctx.lease_id, ctx._nonce, digest)
        return body, "complete"

    def _failure(self, ctx: JobContext, err: BaseException) -> Dict[str, Any]:
        if ctx._why == "cancelled":
            code, message, again = "cancelled", "cancelled at the server's request", False
        elif isinstance(err, Failure):
            code, message, again = err.code, err.message, err.retryable
        else:
            code, message, again = "error", f"{type(err).__name__}: {err}", True
        return {"lease_id": ctx.lease_id, "error_code": code, "message": message[:4000], "retryable": again}

    @staticmethod
    def _release_body(ctx: JobContext, message: str) -> Dict[str, Any]:
        return {"lease_id": ctx.lease_id, "reason": RELEASE_WORKER_STOPPING, "message": message}

    def _report(self, ctx: JobContext, body: Dict[str, Any], kind: str) -> None:
        """Sends a result until the server has it or refused it for good (the Go runner's
        rules), kept in results_dir meanwhile."""
        self._results.save(ctx, kind, body)
        tries, last = 0, False
        while True:
            try:
                self._request(kind, ctx.id, body, ctx.traceparent)
                break
            except TetherError as e:
                if retryable(e.code, e.status):
                    if last:
                        log.error("job %s: the result could not be sent before its lease expired; dropped (RESULT_DROPPED): %s", ctx.id, e)
                        break
                    last = time.monotonic() > ctx._heard + 2 * ctx._ttl
                    tries += 1
                    time.sleep(backoff(tries, RESEND_MIN, RESEND_MAX))
                    continue
                if kind == "complete" and e.code in _REFUSALS:
                    code, again = _REFUSALS[e.code]
                    body = {"lease_id": ctx.lease_id, "error_code": code, "message": e.message[:4000], "retryable": again}
                    kind = "fail"
                    continue
                if e.code != "LEASE_MISMATCH":
                    log.error("job %s: the server refused the result: %s", ctx.id, e)
                break
        self._results.remove(ctx.lease_id)
        self._done(ctx)

    def _resume(self) -> None:
        """Sends again the results a worker on the same results_dir left unsent; their leases
        are heartbeated as running jobs' are until the server has them."""
        for kind, job_id, body, ctx in self._results.load(self):
            with self._lock:
                self._active[ctx.lease_id] = ctx
            log.info("sending job %s's %s kept from before", job_id, kind)
            threading.Thread(target=self._report, args=(ctx, body, kind), name=f"tether-resume-{job_id}", daemon=True).start()

    def _done(self, ctx: JobContext) -> None:
        # Under the lock with the session's first grant (_ws_session) and the end of a pause:
        # the freed slot is granted once, by whichever sees it.
        with self._lock:
            self._active.pop(ctx.lease_id, None)
            self._lock.notify_all()
            ws = self._ws
            if self._paused():
                self._owed += 1
                ws = None
        if ws is not None and not self._stopping.is_set():
            ws.credit(1)

    def _paused(self) -> bool:
        return time.monotonic() < self._paused_until

    def _pause(self, rel: Release) -> None:
        """Takes no job for a while after one given back untried: the job goes back to its
        place in its queue, and taken back at once it would only be given back again, until the
        server spends an attempt on it. 1 s, then twice as long each time in a row, up to 5 minutes."""
        with self._lock:
            self._pauses += 1
            d = backoff(self._pauses, PAUSE_MIN, PAUSE_MAX)
            self._paused_until = time.monotonic() + d
        log.warning("job given back untried (%s: %s); this worker takes no job for %.1f s", rel.reason, rel.message, d)
        timer = threading.Timer(d, self._pause_over)
        timer.daemon = True
        timer.start()

    def _pause_over(self) -> None:
        with self._lock:
            left = self._paused_until - time.monotonic()
            if left > 0:  # a later pause, or a timer that woke early: wait out the rest
                timer = threading.Timer(left, self._pause_over)
                timer.daemon = True
                timer.start()
                return
            self._lock.notify_all()  # a long poll waiting for the pause's end
            owed, self._owed = self._owed, 0
            ws = self._ws
        if ws is not None and owed > 0 and not self._stopping.is_set():
            ws.credit(owed)

    def _request(self, kind: str, job_id: str, body: Dict[str, Any], traceparent: str = "") -> Dict[str, Any]:
        """Sends a job's event or result over the WebSocket link if one is up, else over HTTP,
        and returns the server's answer (raising TetherError for a refusal, UNREACHABLE when
        none came). A result carries the job's trace context, which the server's span of it
        continues."""
        ws = self._ws
        if ws is not None:
            frame = dict(body, type=kind, job_id=job_id)
            if traceparent:
                frame["traceparent"] = traceparent
            return ws.request(frame)
        path = f"/v1/worker/jobs/{quote(job_id)}/{'events' if kind == 'event' else kind}"
        headers = {"traceparent": traceparent} if traceparent else None
        return self._http.request("POST", path, body, headers=headers, again=True)[1] or {}

    def _run_span(self, ctx: JobContext) -> Optional[_otlp.Span]:
        """Starts the span of the job's run, when the worker exports traces and the job names
        one; ctx.traceparent names it from then on."""
        if self._otlp is None:
            return None
        span = self._otlp.start("tether.run", ctx.traceparent, {
            "tether.job.id": ctx.id, "tether.job.type": ctx.type, "tether.queue": ctx.queue,
            "tether.attempt": ctx.attempt, "tether.lease.id": ctx.lease_id})
        if span is not None:
            ctx.traceparent = span.traceparent
        return span

    @staticmethod
    def _end_run_span(span: _otlp.Span, ctx: JobContext, err: Optional[BaseException]) -> None:
        outcome = ctx._why or "succeeded"
        if not ctx._why and isinstance(err, Release):
            outcome = "released"
        elif not ctx._why and err is not None:
            outcome = "failed"
            span.error = err.code if isinstance(err, Failure) else type(err).__name__
        span.attributes["tether.outcome"] = outcome
        span.end()

    def _heartbeat_loop(self) -> None:
        """Heartbeats the leases held over HTTP while no WebSocket link is up (a link
        heartbeats itself), as often as the shortest lease needs, and renews the worker token
        when it is due."""
        interval, last = 10.0, time.monotonic()
        while True:
            with self._lock:
                leases = list(self._active.values())
            if self._stopping.is_set() and not leases:
                return
            try:
                self._renew_token()
            except Exception as e:  # noqa: BLE001 - the heartbeats must go on whatever happens here
                log.error("renewing the worker token failed: %s", e)
            every = min([interval] + [c._heartbeat for c in leases if c._heartbeat > 0])
            if self._ws is not None or not leases or time.monotonic() - last < every:
                with self._lock:
                    self._lock.wait(min(1.0, every))
                continue
            last = time.monotonic()
            try:
                ans = self._http.request("POST", "/v1/worker/heartbeat",
                                         {"leases": [c.lease_id for c in leases]}, again=True)[1] or {}
            except TetherError as e:
                log.warning("heartbeat failed: %s", e)
                continue
            interval = float(ans.get("heartbeat_seconds") or interval)
            self._heartbeat_answered(leases, ans, last)

    def _heartbeat_answered(self, leases: List[JobContext], ans: Dict[str, Any], sent: float) -> None:
        self._note_token(ans)
        cancel, unknown = set(ans.get("cancel") or []), set(ans.get("unknown") or [])
        for c in leases:
            if c.lease_id in unknown:
                c._stop("lost")
                continue
            c._heard = sent
            if c.lease_id in cancel:
                c._stop("cancelled")

    def _finish(self) -> None:
        """The clean stop: running jobs get ``grace`` seconds, then are told to stop; those
        whose handler does not return within STOP_WAIT more are given back (the handler's
        result, if it ever comes, is dropped). run() returns once every result is sent."""
        def wait(until: float, done: Callable[[], bool]) -> None:
            while not done() and time.monotonic() < until:
                self._lock.wait(max(0.0, min(0.5, until - time.monotonic())))

        with self._lock:
            wait(time.monotonic() + self.grace, lambda: not self._active)
            for c in self._active.values():
                if not c._reporting:  # a handler that returned within the grace completes
                    c._stop("stopping")
            wait(time.monotonic() + STOP_WAIT, lambda: all(c._reporting for c in self._active.values()))
            stuck = [c for c in self._active.values() if not c._reporting]
            for c in stuck:
                c._abandoned = True
        for c in stuck:
            log.warning("job %s: its handler did not return after the stop; the job is given back", c.id)
            self._report(c, self._release_body(c, "the worker stopped and its handler did not"), "release")
        with self._lock:
            wait(float("inf"), lambda: not self._active)


class _HandshakeRefused(Exception):
    """The WebSocket handshake itself was refused while the server answered: long-poll. A
    handshake cut without an answer (``cut``: a proxy that drops upgrades, or a server dying as
    it took the connection) counts so too, once no other server upgrades."""

    def __init__(self, message: str, cut: bool = False):
        super().__init__(message)
        self.cut = cut
        self.status = 0


def _classify_handshake(e: BaseException) -> Exception:
    """What a failed WebSocket connect means: a refusal of the handshake (fall back to
    long-polling), a refusal of the worker (a TetherError that is not retryable), or a
    connection that failed (retry)."""
    if isinstance(e, (TetherError, _HandshakeRefused)):
        return e
    response = getattr(e, "response", None)  # websockets >= 13: InvalidStatus
    status = getattr(e, "status_code", None) or getattr(response, "status_code", None)
    if status is not None:
        body = getattr(response, "body", b"") or b""
        err = error_of(status, body, "")
        if status in (401, 403) or err.code in ("UNAUTHENTICATED", "TOKEN_EXPIRED", "WORKER_REVOKED", "PERMISSION_DENIED"):
            return err
        if status >= 500 or status == 429:
            return err
        return _HandshakeRefused(f"the upgrade was answered {status}")
    if isinstance(e, (OSError, asyncio.TimeoutError)):
        return TetherError(UNREACHABLE, f"WebSocket connect: {e}")
    return _HandshakeRefused(str(e) or type(e).__name__, cut=True)


def _handshake_moves_on(err: Exception) -> bool:
    """Whether a failed handshake leaves the worker to try another server: one away, silent, a
    standby, starting or unavailable, or a handshake cut; not a refusal that answered (a proxy's
    doing: long-polling is the way round it), nor one of the worker itself."""
    if isinstance(err, _HandshakeRefused):
        return err.cut
    return isinstance(err, TetherError) and (err.code == UNREACHABLE or err.status in (502, 503, 504))


def _handshake_leader(exc: BaseException, err: Exception) -> str:
    """The leader a standby's refusal names: in its body (websockets >= 13 keeps it) or its
    Tether-Leader header."""
    if isinstance(err, TetherError) and isinstance(err.details.get("leader"), str):
        return err.details["leader"]
    headers = getattr(exc, "headers", None) or getattr(getattr(exc, "response", None), "headers", None)
    try:
        return (headers.get("Tether-Leader") if headers is not None else "") or ""
    except AttributeError:
        return ""


class _WSLink:
    """One WebSocket session's sending side: requests from any thread, each answered by the
    ack that echoes its ref."""

    def __init__(self, worker: Worker, loop: asyncio.AbstractEventLoop, conn: Any, server: int = 0):
        self._worker, self._loop, self._conn, self._server = worker, loop, conn, server
        self._pending: Dict[str, concurrent.futures.Future] = {}
        self._refs = itertools.count(1)
        self._up = True
        self._send_lock = asyncio.Lock()

    async def send(self, frame: Dict[str, Any]) -> None:
        await self._send_text(_encode(frame))

    async def _send_text(self, text: str) -> None:
        async with self._send_lock:
            await self._conn.send(text)

    def _post(self, text: str, ref: str, fut: Optional[concurrent.futures.Future]) -> None:
        # On the loop's thread: text is the frame, encoded by whoever sends it, so that a
        # value that is not JSON raises there and then, not as a link that failed.
        if not self._up:
            if fut is not None:
                fut.set_exception(TetherError(UNREACHABLE, "the WebSocket link is down"))
            return
        if fut is not None:
            self._pending[ref] = fut

        async def go() -> None:
            try:
                await self._send_text(text)
            except Exception as e:  # noqa: BLE001 - the link broke; whoever waits is told
                f = self._pending.pop(ref, None)
                if f is not None and not f.done():
                    f.set_exception(TetherError(UNREACHABLE, f"WebSocket send: {e}"))
        asyncio.ensure_future(go())

    def _numbered(self, frame: Dict[str, Any]):
        """The frame with a ref of its own, encoded: (text, ref)."""
        ref = str(next(self._refs))
        return _encode(dict(frame, ref=ref)), ref

    def request(self, frame: Dict[str, Any], timeout: float = 30.0) -> Dict[str, Any]:
        """Sends a frame from any thread other than the loop's and waits for its ack. A frame
        that is not JSON raises TypeError or ValueError, and nothing is sent."""
        text, ref = self._numbered(frame)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        try:
            self._loop.call_soon_threadsafe(self._post, text, ref, fut)
        except RuntimeError as e:  # the loop is closed: the link is gone
            raise TetherError(UNREACHABLE, "the WebSocket link is down") from e
        try:
            ack = fut.result(timeout)
        except concurrent.futures.TimeoutError as e:
            raise TetherError(UNREACHABLE, f"no answer to {frame.get('type')} in {timeout:.0f} s") from e
        if ack.get("ok") is False:
            err = ack.get("error") or {}
            code = err.get("code", "INTERNAL")
            raise TetherError(code, err.get("message", ""), _codes.CODES.get(code, (500, False))[0],
                              err.get("details") or {})
        return ack

    def credit(self, n: int) -> None:
        try:
            self._loop.call_soon_threadsafe(self._post, _encode({"type": "credit", "n": n}), "", None)
        except RuntimeError:
            pass  # the link is gone; the next session grants what is free

    def close(self) -> None:
        async def go() -> None:
            await self._conn.close(1000, "worker stopping")
        try:
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(go()))
        except RuntimeError:
            pass

    def receive(self, f: Dict[str, Any]) -> None:
        t = f.get("type")
        if t == "assign":
            self._worker._start(f)
        elif t == "cancel":
            with self._worker._lock:
                ctx = self._worker._active.get(f.get("lease_id", ""))
            if ctx is not None:
                ctx._stop("cancelled")
        elif t == "ack":
            fut = self._pending.pop(f.get("ref", ""), None)
            if fut is not None and not fut.done():
                fut.set_result(f)

    def down(self) -> None:
        self._up = False
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(TetherError(UNREACHABLE, "the WebSocket link went down"))
        self._pending.clear()

    async def heartbeats(self, every: float) -> None:
        """Heartbeats the leases held (and the session itself) as often as the shortest of
        them needs, reckoned again as leases come: a job with a short lease arriving while the
        worker idles is heartbeated in time. The first goes at once: the new session adopts
        the leases it names, and a server that restarted puts back, unspent, those it finds
        the worker does not hold."""
        w = self._worker
        last = float("-inf")
        while True:
            await asyncio.sleep(0.25)
            with w._lock:
                leases = list(w._active.values())
            interval = min([every] + [c._heartbeat for c in leases if c._heartbeat > 0])
            if time.monotonic() - last < interval:
                continue
            last = time.monotonic()
            fut: concurrent.futures.Future = concurrent.futures.Future()
            sent = time.monotonic()
            text, ref = self._numbered({"type": "heartbeat", "leases": [c.lease_id for c in leases]})
            self._post(text, ref, fut)
            try:
                ack = await asyncio.wait_for(asyncio.wrap_future(fut), interval)
            except asyncio.TimeoutError:
                # No answer in a heartbeat's time: the server is paused or cut off, and its
                # leases may be handed over meanwhile. Another server (or this one, later) will.
                log.warning("the server did not answer a heartbeat in %.1f s; reconnecting", interval)
                w._http.failover(self._server)
                self._conn.transport.abort()
                return
            except TetherError:
                continue
            if ack.get("ok") is not False:  # a refused heartbeat extended nothing
                w._heartbeat_answered(leases, ack, sent)


def _encode(value: Any) -> str:
    """JSON as the server takes it, I-JSON (_ijson.dumps): NaN, the infinities, a number past a
    double's range and a lone surrogate are refused (ValueError), as is anything JSON has no
    form for (TypeError: a set, bytes, an object)."""
    return _ijson.dumps(value)


#: How deep the server lets JSON nest; deeper data would be refused, and over WebSocket end the session.
JSON_DEPTH_MAX = 512


def _check_depth(value: Any, what: str) -> None:
    """Raises ValueError for a value nested deeper than the server takes."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list, tuple)):
            if depth > JSON_DEPTH_MAX:
                raise ValueError(f"{what} nests deeper than {JSON_DEPTH_MAX} levels")
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))


def _check_writable(path: str) -> None:
    """Raises OSError unless a file can be made in path's directory."""
    d = os.path.dirname(os.path.abspath(path))
    fd, probe = tempfile.mkstemp(prefix=".tether-probe-", dir=d)
    os.close(fd)
    os.unlink(probe)


class _ResultStore:
    """The results a worker has not yet seen the server take, one file per lease in a
    directory (the Go runner's ResultsDir, same rules): written, synced and renamed into place
    before the result is first sent, removed once the server took it or refused it for good."""

    SUFFIX = ".result.json"

    def __init__(self, directory: str):
        self.dir = directory

    def _path(self, lease_id: str) -> str:
        safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in lease_id)
        return os.path.join(self.dir, safe + self.SUFFIX)

    def save(self, ctx: JobContext, kind: str, body: Dict[str, Any]) -> None:
        if not self.dir:
            return
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        heard_ago = time.monotonic() - ctx._heard
        record = {"kind": kind, "job_id": ctx.id, "body": body, "lease_ttl": ctx._ttl,
                  "heard": time.time() - heard_ago}
        path = self._path(ctx.lease_id)
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, separators=(",", ":"), ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def remove(self, lease_id: str) -> None:
        if self.dir:
            try:
                os.unlink(self._path(lease_id))
            except FileNotFoundError:
                pass

    def load(self, worker: "Worker") -> List[Any]:
        """The kept results: (kind, job id, body, a context for their lease). A file that does
        not parse is reported and left where it is, for an operator to look at."""
        if not self.dir or not os.path.isdir(self.dir):
            return []
        out = []
        for name in sorted(os.listdir(self.dir)):
            path = os.path.join(self.dir, name)
            if name.endswith(self.SUFFIX + ".tmp"):
                os.unlink(path)  # a save that never finished: never sent
                continue
            if not name.endswith(self.SUFFIX):
                continue
            try:
                with open(path) as f:
                    r = json.load(f)
                body, job_id, kind = r["body"], r["job_id"], r["kind"]
                ctx = JobContext(worker, {"job_id": job_id, "lease_id": body["lease_id"], "nonce": body.get("nonce", "")})
                ctx._ttl = float(r["lease_ttl"])
                ctx._heard = time.monotonic() - max(0.0, time.time() - float(r["heard"]))
                ctx._reporting = True
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.error("a kept result could not be read; it is left where it is: %s: %s", path, e)
                continue
            out.append((kind, job_id, body, ctx))
        return out
