"""The standard-library OTLP exporter: which variables turn it on and off, and what it sends."""

from __future__ import annotations

import http.server
import json
import logging
import socket
import threading
import time

import pytest

import tether
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
              "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_TIMEOUT",
              "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
              "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture
def hung_collector():
    """A collector that takes the connection and the POST and never answers; got is set once a
    request has arrived."""
    ln = socket.socket()
    ln.bind(("127.0.0.1", 0))
    ln.listen(16)
    got, held = threading.Event(), []

    def serve():
        while True:
            try:
                conn, _ = ln.accept()
            except OSError:
                return
            held.append(conn)
            threading.Thread(target=lambda c=conn: (c.recv(1), got.set(), c.recv(1 << 20)), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{ln.getsockname()[1]}", got
    ln.close()
    for c in held:
        c.close()


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


def test_spans_past_the_queue_are_dropped_not_kept(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "3")
    exp = _otlp.Exporter("http://127.0.0.1:9/v1/traces")  # nobody there: nothing drains
    assert exp.batch_max == 3  # the default 512 is more than the queue holds
    with exp._cond:  # holds the sender off while the queue fills (the lock is re-entrant)
        for _ in range(5):
            exp._add({"name": "tether.run"})
        assert len(exp._spans) == 3 and exp.dropped == 2
    exp.shutdown(timeout=5)
    assert exp.counts() == {"ended": 5, "exported": 0, "failed": 3, "dropped": 2, "unsent": 0, "queued": 0}
    assert "tracing: spans are dropped: the export queue is full" in caplog.text
    assert "5 of 5 spans were not exported: 3 in exports that failed or did not finish, 2 dropped" in caplog.text


@pytest.mark.parametrize("env, want", [
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, 'OTEL_BSP_MAX_QUEUE_SIZE="-1": want a whole number 1..65536'),
    ({"OTEL_BSP_MAX_QUEUE_SIZE": "9999999999"}, 'OTEL_BSP_MAX_QUEUE_SIZE="9999999999"'),
    ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "-5"}, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE="-5"'),
    ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "600", "OTEL_BSP_MAX_QUEUE_SIZE": "100"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=600 is more than"),
    ({"OTEL_BSP_SCHEDULE_DELAY": "0"}, 'OTEL_BSP_SCHEDULE_DELAY="0": want a whole number 1..60000 (milliseconds)'),
    ({"OTEL_BSP_EXPORT_TIMEOUT": "1.5"}, 'OTEL_BSP_EXPORT_TIMEOUT="1.5"'),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, 'OTEL_EXPORTER_OTLP_TIMEOUT="10s"'),
    ({"OTEL_EXPORTER_OTLP_HEADERS": "abc"}, "OTEL_EXPORTER_OTLP_HEADERS: entry 1 has no '='"),
    ({"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "bad key=1"}, "OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 1: 'bad key' is not a header name"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s3cr3t%zz"}, "the value of x-api-key is not %-encoded right"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/xml"}, 'OTEL_EXPORTER_OTLP_PROTOCOL="http/xml"'),
    ({"OTEL_TRACES_EXPORTER": "console"}, 'OTEL_TRACES_EXPORTER="console": tether exports traces over OTLP only'),
    ({"OTEL_SDK_DISABLED": "maybe"}, 'OTEL_SDK_DISABLED="maybe": want true or false'),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT 'collector:4318' is not an http"),
])
def test_bad_settings_are_refused_when_the_worker_is_made(monkeypatch, env, want):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError) as e:
        tether.Worker("http://127.0.0.1:9", otel_endpoint="http://127.0.0.1:4318")
    assert want in str(e.value) and "s3cr3t" not in str(e.value)


def test_settings_from_the_variables(monkeypatch):
    for k, v in {"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_SCHEDULE_DELAY": " 250 ", "OTEL_EXPORTER_OTLP_TIMEOUT": "2000",
                 "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "3000", "OTEL_BSP_EXPORT_TIMEOUT": "4000"}.items():
        monkeypatch.setenv(k, v)
    exp = _otlp.Exporter("http://127.0.0.1:9/v1/traces")
    exp.shutdown()
    assert (exp.queue_max, exp.batch_max, exp.flush_every, exp.send_timeout) == (100, 100, 0.25, 3.0)


def test_a_hung_collector_holds_no_stop(monkeypatch, caplog, hung_collector):
    url, got = hung_collector
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    exp = _otlp.Exporter(_otlp.endpoint_from_env(url))
    for _ in range(2):  # a full batch: its request goes, and is never answered
        exp.start("tether.run", PARENT, {}).end()
    assert got.wait(30)
    exp.start("tether.run", PARENT, {}).end()
    assert exp.counts() == {"ended": 3, "exported": 0, "failed": 0, "dropped": 0, "unsent": 0, "queued": 3}
    began = time.monotonic()
    exp.shutdown(timeout=0.2)
    assert time.monotonic() - began < 5  # the request's own timeout is 10 s
    assert exp.counts() == {"ended": 3, "exported": 0, "failed": 2, "dropped": 0, "unsent": 1, "queued": 0}
    assert "3 of 3 spans were not exported: 2 in exports that failed or did not finish, 0 dropped (the queue was full), 1 unsent at the stop" in caplog.text
