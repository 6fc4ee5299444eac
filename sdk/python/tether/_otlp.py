"""A minimal OpenTelemetry trace exporter: spans sent in batches over OTLP/HTTP as JSON, with the
standard library only, so that a worker where pip cannot reach an index still reports the span
of each job's run. It reads the standard variables: OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER
(``none`` turns it off), OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, OTEL_EXPORTER_OTLP_[TRACES_]HEADERS,
OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (``grpc`` it cannot speak: it says so and exports nothing),
OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT, OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT and OTEL_SERVICE_NAME. Each is checked as the Go
binary checks it, with the same bounds: a value it cannot use raises ValueError naming the
variable when the worker is made, never a default taken in silence. Sampling follows the
assignment's trace context: a run is recorded when its parent was sampled."""

import json
import logging
import os
import re
import secrets
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional

log = logging.getLogger("tether.otlp")

# The defaults of OTEL_BSP_* (the specification's) and their bounds, the Go binary's.
QUEUE_MAX = 2048  # spans waiting; more are dropped (and counted), never blocking a job
QUEUE_MAX_LIMIT = 65536
BATCH_MAX = 512  # spans in one request
FLUSH_EVERY = 5.0  # seconds a batch that is not full waits
EXPORT_TIMEOUT = 30.0  # seconds one export may take (OTEL_BSP_EXPORT_TIMEOUT)
SEND_TIMEOUT = 10.0  # seconds one request may take (OTEL_EXPORTER_OTLP_TIMEOUT)
MILLIS_MAX = 60_000  # the longest time in milliseconds a variable may give
STOP_FLUSH_MAX = 0.5  # seconds a stop waits for the spans still queued: a hung collector costs no more
WARN_EVERY = 30.0  # seconds between two warnings that spans are dropped

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_WHOLE = re.compile(r"^[+-]?[0-9]+$")

SPAN_KIND_CONSUMER = 5
STATUS_ERROR = 2


def parse_traceparent(tp: str):
    """(trace_id, span_id, flags) of a version 00 traceparent, or None."""
    m = _TRACEPARENT.match(tp or "")
    if not m or m.group(1) == "0" * 32 or m.group(2) == "0" * 16:
        return None
    return m.group(1), m.group(2), int(m.group(3), 16)


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()  # an empty value is no value, as the specification says


def _bool_var(name: str) -> bool:
    v = _env(name)
    if v.lower() not in ("", "true", "false"):
        raise ValueError(f"tether: {name}={json.dumps(v)}: want true or false")
    return v.lower() == "true"


def _int_var(name: str, default: int, lo: int, hi: int, unit: str = "") -> int:
    v = _env(name)
    if not v:
        return default
    if not _WHOLE.match(v) or not lo <= int(v) <= hi:
        raise ValueError(f"tether: {name}={json.dumps(v)}: want a whole number {lo}..{hi}{unit}")
    return int(v)


def _millis_var(name: str, default: float) -> float:
    return _int_var(name, int(default * 1000), 1, MILLIS_MAX, " (milliseconds)") / 1000


def endpoint_from_env(explicit: str = "") -> str:
    """The URL spans are posted to, or "" when tracing is off."""
    disabled = _bool_var("OTEL_SDK_DISABLED")
    exporter = _env("OTEL_TRACES_EXPORTER")
    exporters = [e.strip() for e in exporter.split(",")] if exporter else []
    if any(e not in ("otlp", "none") for e in exporters):
        raise ValueError(f"tether: OTEL_TRACES_EXPORTER={json.dumps(exporter)}: "
                         "tether exports traces over OTLP only: want otlp, or none for no traces")
    if disabled or "none" in exporters:
        return ""
    protocol = ""
    for name in ("OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        v = _env(name)
        if v not in ("", "http/protobuf", "http/json", "grpc"):
            raise ValueError(f"tether: {name}={json.dumps(v)}: want http/json (what the Python SDK sends), http/protobuf or grpc")
        protocol = v or protocol
    base, whole = _env("OTEL_EXPORTER_OTLP_ENDPOINT"), _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if base:
        base = _traces_url(base, "OTEL_EXPORTER_OTLP_ENDPOINT")
    if whole:
        _traces_url(whole, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")  # checked; taken whole, as the spec says
    url = _traces_url(explicit) if explicit else whole or base
    if url and protocol == "grpc":
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL is grpc: the tether Python SDK exports over OTLP/HTTP only; no spans are exported")
        return ""
    return url


def _traces_url(base: str, name: str = "the OTLP endpoint") -> str:
    u = urllib.parse.urlsplit(base)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"tether: {name} {base!r} is not an http:// or https:// URL (e.g. http://localhost:4318)")
    base = base.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def _headers_from_env() -> Dict[str, str]:
    """The headers of OTEL_EXPORTER_OTLP_TRACES_HEADERS, else of OTEL_EXPORTER_OTLP_HEADERS (as
    the Go exporter takes them), each key=value,key=value with values %-encoded; both are
    checked. Values are secrets (API keys): an error names keys and places only."""
    found: List[Dict[str, str]] = []
    for name in ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"):
        headers, raw = {}, _env(name)
        for i, pair in enumerate(raw.split(",") if raw else [], 1):
            if "=" not in pair:
                raise ValueError(f"tether: {name}: entry {i} has no '=': want key=value,key=value (values %-encoded)")
            k, v = (x.strip() for x in pair.split("=", 1))
            if not _TOKEN.match(k):
                raise ValueError(f"tether: {name}: entry {i}: {k!r} is not a header name")
            if _BAD_ESCAPE.search(v):
                raise ValueError(f"tether: {name}: the value of {k} is not %-encoded right (a % must be followed by two hex digits)")
            headers[k] = urllib.parse.unquote(v)
        found.append(headers)
    return found[0] or found[1]


def _attr(key: str, value: Any) -> Dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


class Span:
    """One span in flight; end() hands it to the exporter."""

    def __init__(self, exporter: "Exporter", name: str, trace_id: str, parent_id: str, flags: int,
                 attributes: Dict[str, Any]):
        self._exporter = exporter
        self.name = name
        self.trace_id = trace_id
        self.span_id = secrets.token_hex(8)
        self.parent_id = parent_id
        self.flags = flags
        self.attributes = dict(attributes)
        self.start_ns = time.time_ns()
        self.error: Optional[str] = None

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"

    def end(self) -> None:
        if not self.flags & 1:  # not sampled upstream: not recorded
            return
        span = {
            "traceId": self.trace_id, "spanId": self.span_id, "parentSpanId": self.parent_id,
            "name": self.name, "kind": SPAN_KIND_CONSUMER, "flags": 0x100 | self.flags,  # the parent is remote
            "startTimeUnixNano": str(self.start_ns), "endTimeUnixNano": str(time.time_ns()),
            "attributes": [_attr(k, v) for k, v in self.attributes.items()],
        }
        if self.error is not None:
            span["status"] = {"code": STATUS_ERROR, "message": self.error}
        self._exporter._add(span)


class Exporter:
    """Batches spans and posts them on a thread of its own; shutdown() sends what is left, for
    STOP_FLUSH_MAX at most. It counts what became of every span: each one ended is exported,
    failed (in an export that failed or did not finish), dropped (the queue was full) or
    unsent (still queued when the stop's time ran out); shutdown() logs the spans lost."""

    def __init__(self, url: str, service_name: str = "tether-worker"):
        self.url = url
        self.headers = _headers_from_env()
        self.service_name = _env("OTEL_SERVICE_NAME") or service_name
        self.queue_max = _int_var("OTEL_BSP_MAX_QUEUE_SIZE", QUEUE_MAX, 1, QUEUE_MAX_LIMIT)
        self.batch_max = _int_var("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", min(BATCH_MAX, self.queue_max), 1, QUEUE_MAX_LIMIT)
        if self.batch_max > self.queue_max:
            raise ValueError(f"tether: OTEL_BSP_MAX_EXPORT_BATCH_SIZE={self.batch_max} is more than "
                             f"OTEL_BSP_MAX_QUEUE_SIZE={self.queue_max}: a batch is taken from the queue")
        self.flush_every = _millis_var("OTEL_BSP_SCHEDULE_DELAY", FLUSH_EVERY)
        request = _millis_var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", _millis_var("OTEL_EXPORTER_OTLP_TIMEOUT", SEND_TIMEOUT))
        self.send_timeout = min(request, _millis_var("OTEL_BSP_EXPORT_TIMEOUT", EXPORT_TIMEOUT))
        self.ended = self.exported = self.failed = self.dropped = self.unsent = 0
        self._sending = 0  # spans in the request under way
        self._abandoned = False  # the stop gave the request under way up: its outcome is counted
        self._warned = 0.0  # when spans were last said to be dropped (monotonic)
        self._spans: List[Dict[str, Any]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="tether-otlp", daemon=True)
        self._thread.start()

    def start(self, name: str, traceparent: str, attributes: Dict[str, Any]) -> Optional[Span]:
        """A span that is a child of traceparent, or None when it names no trace."""
        parsed = parse_traceparent(traceparent)
        if parsed is None:
            return None
        trace_id, parent_id, flags = parsed
        return Span(self, name, trace_id, parent_id, flags & 1, attributes)

    def _add(self, span: Dict[str, Any]) -> None:
        with self._cond:
            self.ended += 1
            if self._closed:
                self.unsent += 1
                return
            if len(self._spans) >= self.queue_max:
                self.dropped += 1
                if not self._warned or time.monotonic() - self._warned >= WARN_EVERY:
                    self._warned = time.monotonic()
                    log.warning("tracing: spans are dropped: the export queue is full (the collector is slow or away); %d so far", self.dropped)
                return
            self._spans.append(span)
            if len(self._spans) >= self.batch_max:
                self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._closed and len(self._spans) < self.batch_max:
                    self._cond.wait(self.flush_every)
                batch, self._spans = self._spans[:self.batch_max], self._spans[self.batch_max:]
                self._sending = len(batch)
                closed = self._closed and not self._spans
            if batch:
                ok = self._send(batch)
                with self._cond:
                    if self._abandoned:
                        return
                    self._sending = 0
                    if ok:
                        self.exported += len(batch)
                    else:
                        self.failed += len(batch)
            if closed:
                return

    def _send(self, spans: List[Dict[str, Any]]) -> bool:
        body = {"resourceSpans": [{
            "resource": {"attributes": [_attr("service.name", self.service_name), _attr("telemetry.sdk.name", "tether-python"),
                                        _attr("telemetry.sdk.language", "python")]},
            "scopeSpans": [{"scope": {"name": "tether"}, "spans": spans}],
        }]}
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST",
                                     headers=dict(self.headers, **{"Content-Type": "application/json"}))
        try:
            with urllib.request.urlopen(req, timeout=self.send_timeout) as resp:
                resp.read()
            return True
        except Exception as e:  # noqa: BLE001 - tracing never stops the worker
            log.warning("could not export %d spans to %s: %s", len(spans), self.url, e)
            return False

    def counts(self) -> Dict[str, int]:
        """What became of the spans: ended = exported + failed + dropped + unsent + queued."""
        with self._cond:
            return {"ended": self.ended, "exported": self.exported, "failed": self.failed, "dropped": self.dropped,
                    "unsent": self.unsent, "queued": len(self._spans) + self._sending}

    def shutdown(self, timeout: float = STOP_FLUSH_MAX) -> None:
        """Sends what is queued, for timeout seconds at most, then logs the spans lost. A
        request still under way then (a hung collector) is given up, its spans failed, and
        what is still queued is unsent; the sending thread, a daemon, ends with the process."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
        with self._cond:
            if self._thread.is_alive():
                self._abandoned = True
                self.failed += self._sending
                self.unsent += len(self._spans)
                self._sending, self._spans = 0, []
        c = self.counts()
        if c["failed"] or c["dropped"] or c["unsent"]:
            log.warning("tracing: %d of %d spans were not exported: %d in exports that failed or did not finish, "
                        "%d dropped (the queue was full), %d unsent at the stop",
                        c["failed"] + c["dropped"] + c["unsent"], c["ended"], c["failed"], c["dropped"], c["unsent"])
