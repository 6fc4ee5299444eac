"""A minimal OpenTelemetry trace exporter: spans sent in batches over OTLP/HTTP as JSON, with the
standard library only, so that a worker where pip cannot reach an index still reports the span
of each job's run. It reads the standard variables: OTEL_SDK_DISABLED, OTEL_TRACES_EXPORTER
(``none`` turns it off), OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, OTEL_EXPORTER_OTLP_[TRACES_]HEADERS,
OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (``grpc`` it cannot speak: it says so and exports nothing)
and OTEL_SERVICE_NAME."""

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

BATCH_MAX = 512  # spans in one request
QUEUE_MAX = 2048  # spans waiting; more are dropped (and counted), never blocking a job
FLUSH_EVERY = 1.0  # seconds
SEND_TIMEOUT = 10.0

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

SPAN_KIND_CONSUMER = 5
STATUS_ERROR = 2


def parse_traceparent(tp: str):
    """(trace_id, span_id, flags) of a version 00 traceparent, or None."""
    m = _TRACEPARENT.match(tp or "")
    if not m or m.group(1) == "0" * 32 or m.group(2) == "0" * 16:
        return None
    return m.group(1), m.group(2), int(m.group(3), 16)


def endpoint_from_env(explicit: str = "") -> str:
    """The URL spans are posted to, or "" when tracing is off."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true" or os.environ.get("OTEL_TRACES_EXPORTER") == "none":
        return ""
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    if protocol == "grpc":
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL is grpc: the tether Python SDK exports over OTLP/HTTP only; no spans are exported")
        return ""
    if explicit:
        return _traces_url(explicit)
    if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]  # the whole URL, as the spec says
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return _traces_url(os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
    return ""


def _traces_url(base: str) -> str:
    u = urllib.parse.urlsplit(base)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise ValueError(f"tether: the OTLP endpoint {base!r} is not an http:// or https:// URL (e.g. http://localhost:4318)")
    base = base.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def _headers_from_env() -> Dict[str, str]:
    raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or os.environ.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    out = {}
    for pair in raw.split(","):
        if "=" in pair:
            k, v = pair.split("=", 1)
            out[urllib.parse.unquote(k.strip())] = urllib.parse.unquote(v.strip())
    return out


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
    """Batches spans and posts them on a thread of its own; shutdown() sends what is left."""

    def __init__(self, url: str, service_name: str = "tether-worker"):
        self.url = url
        self.headers = _headers_from_env()
        self.service_name = os.environ.get("OTEL_SERVICE_NAME") or service_name
        self.dropped = 0
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
            if len(self._spans) >= QUEUE_MAX:
                self.dropped += 1
                return
            self._spans.append(span)
            if len(self._spans) >= BATCH_MAX:
                self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._closed:
                    self._cond.wait(FLUSH_EVERY)
                batch, self._spans = self._spans[:BATCH_MAX], self._spans[BATCH_MAX:]
                closed = self._closed and not self._spans
            if batch:
                self._send(batch)
            if closed:
                return

    def _send(self, spans: List[Dict[str, Any]]) -> None:
        body = {"resourceSpans": [{
            "resource": {"attributes": [_attr("service.name", self.service_name), _attr("telemetry.sdk.name", "tether-python"),
                                        _attr("telemetry.sdk.language", "python")]},
            "scopeSpans": [{"scope": {"name": "tether"}, "spans": spans}],
        }]}
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST",
                                     headers=dict(self.headers, **{"Content-Type": "application/json"}))
        try:
            with urllib.request.urlopen(req, timeout=SEND_TIMEOUT) as resp:
                resp.read()
        except Exception as e:  # noqa: BLE001 - tracing never stops the worker
            log.warning("could not export %d spans to %s: %s", len(spans), self.url, e)

    def shutdown(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)
