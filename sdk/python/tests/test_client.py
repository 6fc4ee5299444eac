"""Every client call against the real server."""

from __future__ import annotations

import re
import threading

import pytest

from tether import Client, TetherError

from conftest import ADMIN_TOKEN


def test_submit_get_list_cancel_delete(client):
    job = client.submit("q1", "t1", {"n": 1}, priority=5, labels={"team": "a"}, max_attempts=2)
    assert job["status"] == "queued" and job["priority"] == 5 and job["labels"] == {"team": "a"}
    assert job["receipt"]["seq"] > 0 and job["idempotent_hit"] is False
    assert client.get(job["id"])["payload"] == {"n": 1}

    other = client.submit("q2", "t2", delay_seconds=3600)
    assert other["status"] == "scheduled"
    page = client.list(queue="q1")
    assert [j["id"] for j in page["jobs"]] == [job["id"]]
    assert {j["id"] for j in client.iter_jobs(limit=1)} == {job["id"], other["id"]}
    assert [j["id"] for j in client.list(label="team=a")["jobs"]] == [job["id"]]

    assert client.explain(job["id"])["code"] in ("no_worker_for_queue", "workers_busy")
    assert client.cancel(job["id"])["status"] == "cancelled"
    with pytest.raises(TetherError) as e:
        client.cancel(job["id"])
    assert e.value.code == "ALREADY_TERMINAL" and e.value.status == 409 and not e.value.retryable
    assert client.delete(job["id"])
    with pytest.raises(TetherError) as e:
        client.get(job["id"])
    assert e.value.code in ("JOB_EXPIRED", "JOB_NOT_FOUND")


def test_batch_and_idempotency(client):
    jobs = client.submit_batch([client.job_request("b", "t", {"i": i}) for i in range(3)])
    assert [j["payload"]["i"] for j in jobs] == [0, 1, 2]

    first = client.submit("b", "t", {"x": 1}, idempotency_key="k-1")
    # A retry in another trace is the same submit.
    again = client.submit("b", "t", {"x": 1}, idempotency_key="k-1",
                          traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    assert again["id"] == first["id"] and again["idempotent_hit"] is True
    with pytest.raises(TetherError) as e:
        client.submit("b", "t", {"x": 2}, idempotency_key="k-1")
    assert e.value.code == "IDEMPOTENCY_KEY_REUSED" and e.value.status == 422


def test_a_traceparent_that_is_not_one_is_not_sent(client):
    # As the server ignores one that does not parse, the client does not send it; a CR or LF
    # must not break the request, nor the connection the next request takes.
    for bad in ("bad\r\nX-Evil: 1", "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", "garbage"):
        job = client.submit("b", "t", traceparent=bad)
        assert job["status"] == "queued"
        assert client.get(job["id"])["id"] == job["id"]


def test_a_refused_header_does_not_break_the_next_request(client):
    client.queues()  # a kept-alive connection
    with pytest.raises(ValueError):
        client._http.request("GET", "/v1/queues", headers={"X-Bad": "a\r\nb"})
    assert client.queues() is not None


def test_errors_carry_code_status_and_request_id(client):
    with pytest.raises(TetherError) as e:
        client.get("01NOSUCHJOB0000000000000000")
    assert e.value.code == "JOB_NOT_FOUND" and e.value.status == 404 and e.value.request_id
    with pytest.raises(TetherError) as e:
        client.submit("", "t")
    assert e.value.code == "INVALID_ARGUMENT" and e.value.status == 400
    with pytest.raises(TetherError) as e:
        client.retry(client.submit("q", "t")["id"])
    assert e.value.code == "NOT_DEAD_LETTERED"


def test_unreachable_server_is_retryable():
    c = Client("http://127.0.0.1:9", timeout=2)
    with pytest.raises(TetherError) as e:
        c.quota()
    assert e.value.code == "UNREACHABLE" and e.value.retryable


def test_reservations_and_quota(client):
    r = client.reserve(60)
    assert r["id"] and client.quota()["reservations"] == 1
    job = client.submit("q", "t", reservation_id=r["id"])
    assert job["status"] == "queued"
    assert client.quota()["reservations"] == 0
    r2 = client.reserve()
    client.release(r2["id"])
    with pytest.raises(TetherError) as e:
        client.release(r2["id"])
    assert e.value.code == "RESERVATION_NOT_FOUND"
    assert any(q["name"] == "q" for q in client.queues()["queues"])


def test_watch_resumes_without_gap_or_repeat(client):
    job = client.submit("w", "t")
    client.cancel(job["id"])
    events = list(client.watch(job["id"]))
    assert [e["number"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "job.submitted" and events[-1]["type"] == "job.cancelled"
    assert [e["number"] for e in client.watch(job["id"], after=1)] == [e["number"] for e in events[1:]]
    assert client.wait(job["id"], timeout=10)["status"] == "cancelled"


FLOW = """
flow:
  steps:
    fetch: {type: fetch, queue: flowq}
    train: {type: train, queue: flowq, needs: [fetch]}
"""


def test_flows(client, tmp_path):
    f = client.submit_flow(FLOW, name="pipeline", idempotency_key="f-1")
    assert f["name"] == "pipeline" and f["status"] in ("running", "pending")
    assert client.submit_flow(FLOW, name="pipeline", idempotency_key="f-1")["id"] == f["id"]
    path = tmp_path / "nightly.yaml"
    path.write_text(FLOW)
    g = client.submit_flow(str(path))
    assert g["name"] == "nightly"
    assert client.flow(f["id"])["id"] == f["id"]
    assert {x["id"] for x in client.flows()["flows"]} >= {f["id"], g["id"]}
    assert client.cancel_flow(f["id"])["status"] == "cancelled"
    assert any(e["type"].startswith("flow.") for e in client.watch_flow(f["id"]))
    with pytest.raises(TetherError) as e:
        client.submit_flow("flow: {steps: {a: {type: x, queue: q, needs: [b]}}}", name="bad")
    assert e.value.code == "INVALID_FLOW" and e.value.details == {"step": "a"}


def test_schedules(client):
    s = client.create_schedule("hourly", "0 * * * *", client.job_request("s", "tick"))
    assert s["status"] == "active" and s["next_fire_at"]
    assert client.schedule(s["id"])["name"] == "hourly"
    assert [x["id"] for x in client.schedules()] == [s["id"]]
    assert client.pause_schedule(s["id"])["status"] == "paused"
    assert client.resume_schedule(s["id"])["status"] == "active"
    client.delete_schedule(s["id"])
    with pytest.raises(TetherError) as e:
        client.schedule(s["id"])
    assert e.value.code == "SCHEDULE_NOT_FOUND"
    with pytest.raises(TetherError) as e:
        client.create_schedule("bad", "not cron", client.job_request("s", "tick"))
    assert e.value.code == "INVALID_SCHEDULE"


def test_rate_limits(client):
    client.set_rate_limit("api", 5, 10)
    limits = client.rate_limits()
    assert any(l["name"] == "api" for l in limits["rate_limits"])
    job = client.submit("r", "t", rate_limits=["api", {"name": "api", "key": "token-1"}])
    assert job["status"] == "queued"
    client.delete_rate_limit("api")
    with pytest.raises(TetherError) as e:
        client.submit("r", "t", rate_limits=["api"])
    assert e.value.code == "RATE_LIMIT_NOT_FOUND"


def test_admin_and_tenants(auth_server):
    admin = Client(auth_server.url, ADMIN_TOKEN)
    key = admin.create_api_key("acme")
    acme = Client(auth_server.url, key["api_key"])
    assert acme.quota()["tenant"] == "acme"
    admin.set_quota("acme", max_active=1)
    acme.submit("q", "t")
    with pytest.raises(TetherError) as e:
        acme.submit("q", "t")
    assert e.value.code == "QUOTA_EXCEEDED" and e.value.status == 429 and not e.value.retryable
    token = admin.create_enroll_token("acme", uses=1)["enroll_token"]
    reg = acme.register_worker("w1", ["q"], enroll_token=token)
    assert reg["worker_token"] and reg["worker_id"]
    with pytest.raises(TetherError) as e:
        acme.register_worker("w2", ["q"], enroll_token=token)
    assert e.value.code == "ENROLL_TOKEN_USED_UP"
    acme.revoke_worker(reg["worker_id"])
    admin.revoke_api_key(key["id"])
    with pytest.raises(TetherError) as e:
        acme.quota()
    assert e.value.code in ("PERMISSION_DENIED", "UNAUTHENTICATED") and e.value.status in (401, 403)
    with pytest.raises(TetherError) as e:
        Client(auth_server.url).quota()
    assert e.value.code == "UNAUTHENTICATED"


def test_client_is_thread_safe(client):
    ids, errors = [], []

    def submit():
        try:
            for _ in range(20):
                ids.append(client.submit("threads", "t")["id"])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(ids)) == 160


def test_a_redirect_is_an_error_not_an_answer():
    import http.server

    class Redirect(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self):
            self.send_response(301)
            self.send_header("Location", "https://elsewhere.example/v1/jobs")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(TetherError) as e:
            Client(f"http://127.0.0.1:{srv.server_address[1]}").submit("q", "t")
        assert e.value.code == "HTTP_301" and "https://elsewhere.example" in e.value.message
        with pytest.raises(TetherError) as e:  # a watch's stream too
            list(Client(f"http://127.0.0.1:{srv.server_address[1]}").watch("01J"))
        assert e.value.code == "HTTP_301"
    finally:
        srv.shutdown()


def test_iter_jobs_from_a_cursor(client):
    ids = [client.submit("it", "t")["id"] for _ in range(3)]
    page = client.list(queue="it", limit=1)
    rest = [j["id"] for j in client.iter_jobs(queue="it", limit=1, cursor=page["next_cursor"])]
    assert [page["jobs"][0]["id"]] + rest == ids


def test_signing_without_a_library_says_what_to_install(monkeypatch):
    import sys

    from tether import SigningUnavailable
    for name in ("nacl", "nacl.signing", "cryptography", "cryptography.hazmat.primitives",
                 "cryptography.hazmat.primitives.asymmetric.ed25519"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails
    with pytest.raises(SigningUnavailable) as e:
        from tether import Signer
        Signer.generate()
    assert "PyNaCl or cryptography" in str(e.value) and "python3-nacl" in str(e.value)


def test_what_is_not_i_json_is_refused_before_it_is_sent(client):
    """A value the server would refuse as INVALID_JSON (I-JSON, RFC 7493: a number past a
    double's range, a lone surrogate, NaN or an infinity) is a ValueError naming the place, and
    nothing is sent; what I-JSON takes reads back the same."""
    for payload, says in [({"n": [1, 10 ** 400]}, "the number at payload.n[1]"), ({"s": "ab\ud800"}, r"\ud800 in the string at payload.s"),
                          ({"p": {"\udc00": 1}}, r"\udc00 in a key of the object at payload.p"), ({"x": float("inf")}, "not JSON compliant")]:
        with pytest.raises(ValueError, match=re.escape(says)):
            client.submit("ijson", "t", payload)
    assert client.list(queue="ijson")["jobs"] == []
    taken = {"s": "caf\u00e9 \U0001F600", "big": 10 ** 308, "max": 1.7976931348623157e308}
    assert client.get(client.submit("ijson", "t", taken)["id"])["payload"] == taken
    # The server's rule is the contract: a body sent as it is gets INVALID_JSON naming the place.
    with pytest.raises(TetherError) as e:
        client._http.request("POST", "/v1/jobs", raw=b'{"queue":"ijson","type":"t","payload":{"n":1e999}}')
    assert e.value.code == "INVALID_JSON" and "payload.n" in e.value.message and e.value.status == 400
