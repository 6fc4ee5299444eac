"""The standard-library OTLP exporter: which variables turn it on and off, and what it sends."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from tether import _otlp

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self):  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).bodies.append((self.path, self.headers, json.loads(body)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.bodies = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", _Receiver.bodies
    srv.shutdown()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
              "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_SERVICE_NAME",
              "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(k, raising=False)


def test_endpoint_from_the_variables(monkeypatch):
    assert _otlp.endpoint_from_env() == ""
    assert _otlp.endpoint_from_env("http://c:4318") == "http://c:4318/v1/traces"
    assert _otlp.endpoint_from_env("http://c:4318/v1/traces/") == "http://c:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318/")
    assert _otlp.endpoint_from_env() == "http://base:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/custom")
    assert _otlp.endpoint_from_env() == "http://t:9/custom"  # taken whole, as the specification says
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")  # it cannot: it says so and exports nothing
    assert _otlp.endpoint_from_env("http://c:4317") == ""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    assert _otlp.endpoint_from_env("http://c:4318") == "http://c:4318/v1/traces"
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert _otlp.endpoint_from_env("http://c:4318") == ""
    monkeypatch.delenv("OTEL_TRACES_EXPORTER")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "TRUE")
    assert _otlp.endpoint_from_env() == ""


def test_a_bad_endpoint_is_refused():
    with pytest.raises(ValueError, match="not an http"):
        _otlp.endpoint_from_env("collector:4318")


def test_a_span_is_sent_as_otlp_json(receiver, monkeypatch):
    url, bodies = receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s%20ecret,other=1")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gpu-box")
    exp = _otlp.Exporter(_otlp.endpoint_from_env(url))
    span = exp.start("tether.run", PARENT, {"tether.job.id": "J", "tether.attempt": 2})
    assert span.traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-") and span.traceparent.endswith("-01")
    assert span.span_id != "00f067aa0ba902b7"
    span.error = "oom"
    span.end()
    assert exp.start("tether.run", "not a traceparent", {}) is None
    unsampled = exp.start("tether.run", PARENT[:-2] + "00", {})
    unsampled.end()  # not recorded: nothing sent
    exp.shutdown()
    assert len(bodies) == 1
    path, headers, body = bodies[0]
    assert path == "/v1/traces" and headers["x-api-key"] == "s ecret" and headers["Content-Type"] == "application/json"
    rs = body["resourceSpans"][0]
    assert {"key": "service.name", "value": {"stringValue": "gpu-box"}} in rs["resource"]["attributes"]
    (sent,) = rs["scopeSpans"][0]["spans"]
    assert sent["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736" and sent["parentSpanId"] == "00f067aa0ba902b7"
    assert sent["spanId"] == span.span_id and sent["name"] == "tether.run" and sent["kind"] == _otlp.SPAN_KIND_CONSUMER
    assert int(sent["endTimeUnixNano"]) >= int(sent["startTimeUnixNano"]) > 0
    assert {"key": "tether.attempt", "value": {"intValue": "2"}} in sent["attributes"]
    assert sent["status"] == {"code": 2, "message": "oom"}


def test_spans_past_the_queue_are_dropped_not_kept(monkeypatch):
    monkeypatch.setattr(_otlp, "QUEUE_MAX", 3)
    monkeypatch.setattr(_otlp, "BATCH_MAX", 100)
    exp = _otlp.Exporter("http://127.0.0.1:9/v1/traces")  # nobody there: nothing drains
    with exp._cond:  # holds the sender off while the queue fills (the lock is re-entrant)
        for _ in range(5):
            exp._add({"name": "tether.run"})
        assert len(exp._spans) == 3 and exp.dropped == 2
    exp.shutdown(timeout=5)
