"""The worker against the real server: real jobs, real processes, real signals."""

from __future__ import annotations

import http.client
import http.server
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse

import pytest

from tether import Client, Failure, JobContext, Release, Signer, TetherError, Worker, output_hash
from tether.errors import UNREACHABLE


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def worker_events(client, job_id):
    """The events the worker appended to a job's stream: (event_type, data), in order."""
    return [(e["data"]["event_type"], e["data"]["data"]) for e in client.events(job_id)["events"]
            if e["type"] == "job.progress"]


def run_in_thread(worker: Worker) -> threading.Thread:
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    return t


@pytest.fixture(params=["longpoll", "websocket"])
def transport(request):
    return request.param


@pytest.fixture
def make_worker(server, transport):
    started = []

    def make(**kw) -> Worker:
        kw.setdefault("queues", ["py"])
        kw.setdefault("transport", transport)
        w = Worker(server.url, **kw)
        started.append(w)
        return w

    yield make
    for w in started:
        w.stop()


def test_worker_runs_a_job_with_progress_and_logs(client, make_worker):
    w = make_worker(capacity=2)

    @w.handler("greet")
    def greet(ctx):
        assert ctx.attempt == 1 and ctx.queue == "py" and ctx.lease_expires_at is not None
        assert ctx.traceparent == TRACEPARENT
        ctx.progress({"done": 1, "of": 2})
        ctx.log("halfway")
        ctx.progress({"done": 2, "of": 2})
        return {"greeting": "hello " + ctx.payload["name"], "ünïcode": "\u2028"}

    run_in_thread(w)
    job = client.submit("py", "greet", {"name": "ada"}, traceparent=TRACEPARENT)
    done = client.wait(job["id"], timeout=30)
    want = {"greeting": "hello ada", "ünïcode": "\u2028"}
    assert done["status"] == "succeeded" and done["output"] == want
    assert done["output_hash"] == output_hash(want)
    assert worker_events(client, job["id"]) == [("progress", {"done": 1, "of": 2}), ("log", "halfway"),
                                                ("progress", {"done": 2, "of": 2})]
    assert w.connected_transport == w.transport


def test_progress_is_written_once_when_its_answer_is_lost(client, make_worker):
    w = make_worker()
    real = w._request
    lost = []

    def lose_first_event_answer(kind, job_id, body, traceparent=""):
        answer = real(kind, job_id, body, traceparent)
        if kind == "event" and not lost:
            lost.append(job_id)
            raise TetherError(UNREACHABLE, "the answer was lost")  # after the server wrote it
        return answer

    w._request = lose_first_event_answer

    @w.handler()
    def run(ctx):
        ctx.progress({"p": 1})
        return None

    run_in_thread(w)
    job = client.submit("py", "any")
    assert client.wait(job["id"], timeout=30)["status"] == "succeeded"
    assert lost, "the answer was never lost"
    assert worker_events(client, job["id"]) == [("progress", {"p": 1})]


def test_cancel_reaches_the_handler(client, make_worker):
    w = make_worker()
    started = threading.Event()

    @w.handler()
    def slow(ctx):
        started.set()
        assert ctx.wait_cancelled(30), "the cancel never arrived"
        assert ctx.cancel_reason == "cancelled"
        ctx.check_cancelled()
        return "not sent"

    run_in_thread(w)
    job = client.submit("py", "slow", lease_ttl_seconds=5)  # heartbeats every 1.7 s
    assert started.wait(30)
    assert client.cancel(job["id"])["cancel_requested"] is True
    assert client.wait(job["id"], timeout=30)["status"] == "cancelled"


def test_exceptions_fail_the_attempt(client, make_worker):
    w = make_worker()

    @w.handler("boom")
    def boom(ctx):
        raise ValueError("no such file")

    @w.handler("bad")
    def bad(ctx):
        raise Failure("bad_input", "the payload is not an image", retryable=False)

    @w.handler("huge")
    def huge(ctx):
        return "x" * (2 << 20)

    run_in_thread(w)
    boom_job = client.submit("py", "boom", max_attempts=1)
    bad_job = client.submit("py", "bad", max_attempts=5)
    huge_job = client.submit("py", "huge", max_attempts=5)
    boom_done = client.wait(boom_job["id"], timeout=30)
    assert boom_done["status"] == "failed" and boom_done["dead_reason"] == "max_attempts"
    assert boom_done["error"]["code"] == "error" and "no such file" in boom_done["error"]["message"]
    bad_done = client.wait(bad_job["id"], timeout=30)
    assert bad_done["status"] == "failed" and bad_done["dead_reason"] == "non_retryable"
    assert bad_done["error"] == {"code": "bad_input", "message": "the payload is not an image"}
    huge_done = client.wait(huge_job["id"], timeout=30)
    assert huge_done["error"]["code"] == "output_too_large" and huge_done["attempt"] == 1


def test_signed_results(client, make_worker):
    signer = Signer.generate()
    good = make_worker(signer=signer, queues=["signed"])

    @good.handler()
    def ok(ctx):
        return {"n": 1}

    run_in_thread(good)
    job = client.submit("signed", "t")
    assert client.wait(job["id"], timeout=30)["status"] == "succeeded"

    # A tampered signature (made over another output) is refused by the server as
    # SIGNATURE_INVALID, and the worker reports the attempt failed so: the job's output is not
    # the one the signature covers, and another worker may run it.
    real = signer.sign_completion
    signer.sign_completion = lambda job_id, lease_id, nonce, _hash: real(job_id, lease_id, nonce, output_hash({"n": 666}))
    job = client.submit("signed", "t", max_attempts=1)
    done = client.wait(job["id"], timeout=30)
    assert done["status"] == "failed" and done["error"]["code"] == "signature_invalid"
    assert done["output"] is None


def test_a_worker_with_the_wrong_key_stops_at_once(server, make_worker):
    forger = make_worker(signer=Signer.generate(), queues=["forged"])
    forger.register()
    forger.handle("t", lambda ctx: None)
    forger.signer = Signer.generate()  # not the key it registered
    with pytest.raises(TetherError) as e:
        forger.run()
    assert e.value.code == "WORKER_MISCONFIGURED" and "not the one whose public key it registered" in e.value.message
    forger.signer = None
    with pytest.raises(TetherError) as e:
        forger.run()
    assert e.value.code == "WORKER_MISCONFIGURED" and "give it the key" in e.value.message


WORKER_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {sdk!r})
    from tether import Worker
    w = Worker({url!r}, queues=["term"], transport={transport!r}, grace={grace!r})

    @w.handler()
    def forever(ctx):
        print("started", flush=True)
        if {handler!r} == "deaf":
            time.sleep(3600)  # a handler that never looks at ctx.cancelled
        if {handler!r} == "returns":  # as ctx.cancelled's docstring says: check the flag, return
            while not ctx.cancelled:
                time.sleep(0.05)
            return {{"stopped": True}}
        ctx.wait_cancelled()
        ctx.check_cancelled()

    w.run()
    print("stopped", flush=True)
""")


@pytest.mark.parametrize("handler,grace", [("raises", 0.5), ("deaf", 0.5), ("returns", 1)],
                         ids=["cooperative", "deaf-handler", "returns-its-output"])
def test_sigterm_gives_the_running_job_back(client, server, make_worker, transport, handler, grace):
    sdk = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = WORKER_SCRIPT.format(sdk=sdk, url=server.url, transport=transport, handler=handler, grace=grace)
    proc = subprocess.Popen([sys.executable, "-c", script],
                            stdout=subprocess.PIPE, text=True)
    try:
        job = client.submit("term", "t", max_attempts=1)
        assert proc.stdout.readline().strip() == "started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert proc.stdout.read().strip() == "stopped"
    finally:
        proc.kill()
    after = client.get(job["id"])
    # Given back untried: queued again, and max_attempts=1 is not spent, whatever the handler
    # returned once told to stop.
    assert after["status"] == "queued" and after["lease"] is None and after["attempt"] == 0
    last = client.events(job["id"])["events"][-1]
    assert last["type"] == "job.lease_released" and last["data"]["reason"] == "worker_stopping"
    second = make_worker(queues=["term"])
    second.handle("t", lambda ctx: "ran again")
    run_in_thread(second)
    done = client.wait(job["id"], timeout=30)
    assert done["status"] == "succeeded" and done["output"] == "ran again"


def test_a_result_waits_out_a_server_restart(client, make_worker, server):
    w = make_worker()
    running, finish = threading.Event(), threading.Event()

    @w.handler()
    def job(ctx):
        running.set()
        finish.wait(60)
        return {"after": "restart"}

    run_in_thread(w)
    j = client.submit("py", "t", lease_ttl_seconds=30)
    assert running.wait(30)
    server.stop(signal.SIGKILL)
    finish.set()  # the result is sent while the server is down, and kept until it is back
    server.start()
    done = Client(server.url).wait(j["id"], timeout=60)
    assert done["status"] == "succeeded" and done["output"] == {"after": "restart"}
    assert done["attempt"] == 1


def test_a_worker_without_a_handler_for_the_type_fails_the_attempt(client, make_worker):
    w = make_worker()

    @w.handler("known")
    def known(ctx):
        return 1

    run_in_thread(w)
    job = client.submit("py", "unknown", max_attempts=1)
    done = client.wait(job["id"], timeout=30)
    assert done["error"]["code"] == "no_handler"


class _NoWebSocketProxy(http.server.ThreadingHTTPServer):
    """A proxy that passes plain HTTP to the server and refuses every WebSocket upgrade, as a
    proxy or firewall that blocks WebSocket does."""

    daemon_threads = True

    def __init__(self, upstream: str):
        self.upstream = urllib.parse.urlsplit(upstream)
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _proxy(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            body = b"no WebSocket here"
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        up = self.server.upstream
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        conn.request(self.command, self.path, body=data or None, headers=headers)
        resp = conn.getresponse()
        payload = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        conn.close()

    do_GET = do_POST = do_DELETE = _proxy


def test_auto_falls_back_to_long_polling_where_websocket_is_blocked(client, server):
    proxy = _NoWebSocketProxy(server.url)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        w = Worker(proxy.url, queues=["blocked"], transport="auto")
        w.handle("t", lambda ctx: ctx.progress(1) and "through the proxy")
        run_in_thread(w)
        job = client.submit("blocked", "t")
        done = client.wait(job["id"], timeout=30)
        assert done["status"] == "succeeded" and done["output"] == "through the proxy"
        assert w.connected_transport == "longpoll"
        w.stop()

        strict = Worker(proxy.url, queues=["blocked"], transport="websocket")
        strict.handle("t", lambda ctx: None)
        with pytest.raises(TetherError) as e:
            strict.run()
        assert e.value.code == "BAD_HANDSHAKE"
    finally:
        proxy.shutdown()


def test_the_worker_token_is_renewed_before_it_expires(tether_bin, tmp_path, transport):
    from conftest import Server
    server = Server(tether_bin, str(tmp_path / "data"), "--worker-token-ttl", "10s").start()
    try:
        token_file = tmp_path / "token"
        w = Worker(server.url, queues=["renew"], transport=transport, token_file=str(token_file))
        w.handle("t", lambda ctx: "still working")
        run_in_thread(w)
        client = Client(server.url)
        first = client.wait(client.submit("renew", "t")["id"], timeout=30)
        assert first["status"] == "succeeded"
        original = token_file.read_text().strip()
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        # Past the first token's 10 s (and its grace after a renewal), the worker still works.
        deadline = time.monotonic() + 40
        while token_file.read_text().strip() == original and time.monotonic() < deadline:
            time.sleep(0.2)
        assert token_file.read_text().strip() != original, "the token was never renewed"
        time.sleep(11)  # the original token has expired by now
        done = client.wait(client.submit("renew", "t")["id"], timeout=30)
        assert done["status"] == "succeeded" and done["output"] == "still working"
        w.stop()
    finally:
        server.stop(signal.SIGKILL)


def wait_connected(w: Worker, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not w.connected_transport and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.connected_transport, "the worker never connected"


def test_a_short_lease_arriving_while_idle_is_heartbeated_in_time(client, make_worker):
    w = make_worker()
    w.handle("t", lambda ctx: time.sleep(8) or "kept")
    run_in_thread(w)
    wait_connected(w)
    time.sleep(2.5)  # into the idle worker's 10 s heartbeat interval
    job = client.submit("py", "t", lease_ttl_seconds=5, max_attempts=1)
    done = client.wait(job["id"], timeout=60)
    assert done["status"] == "succeeded" and done["attempt"] == 1


def test_an_idle_worker_stops_promptly(make_worker):
    w = make_worker()
    w.handle("t", lambda ctx: None)
    t = run_in_thread(w)
    wait_connected(w)
    w.stop()
    t.join(10)
    assert not t.is_alive(), "the worker was still stopping 10 s later"


def test_events_from_many_threads_are_all_written(client, make_worker):
    w = make_worker()

    @w.handler()
    def fan_out(ctx):
        numbers = []
        threads = [threading.Thread(target=lambda: numbers.extend(ctx.progress(i) for i in range(20))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sorted(numbers)

    run_in_thread(w)
    job = client.submit("py", "t")
    done = client.wait(job["id"], timeout=60)
    assert len(worker_events(client, job["id"])) == 160
    assert len(set(done["output"])) == 160 and 0 not in done["output"]


def test_output_nested_too_deep_fails_the_attempt_not_the_session(client, make_worker):
    w = make_worker()

    @w.handler()
    def deep(ctx):
        if ctx.payload == "deep":
            v = []
            for _ in range(600):
                v = [v]
            return v
        return "fine"

    run_in_thread(w)
    bad = client.wait(client.submit("py", "t", "deep", max_attempts=1)["id"], timeout=30)
    assert bad["error"]["code"] == "bad_output" and "deeper than 512" in bad["error"]["message"]
    assert client.wait(client.submit("py", "t", "ok")["id"], timeout=30)["output"] == "fine"


def test_a_revoked_worker_stops_with_the_reason(client, make_worker):
    w = make_worker()
    w.handle("t", lambda ctx: None)
    errors = []

    def run():
        try:
            w.run()
        except TetherError as e:
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_connected(w)
    client.revoke_worker(w.worker_id or client.workers()["workers"][0]["id"])
    t.join(30)
    assert not t.is_alive() and errors and errors[0].code == "WORKER_REVOKED", errors


def test_a_worker_started_before_its_server_waits_for_it(server, transport, tmp_path):
    server.stop(signal.SIGKILL)
    w = Worker(server.url, queues=["early"], transport=transport, token_file=str(tmp_path / "token"))
    w.handle("t", lambda ctx: "after all")
    run_in_thread(w)
    time.sleep(1)  # it is trying to register meanwhile
    server.start()
    client = Client(server.url)
    try:
        done = client.wait(client.submit("early", "t")["id"], timeout=60)
        assert done["output"] == "after all"
    finally:
        w.stop()


def test_the_token_file_is_kept_private_and_checked_before_registering(server, client, tmp_path):
    old = tmp_path / "token"
    old.write_text("stale\n")
    os.chmod(old, 0o644)
    w = Worker(server.url, queues=["q"], token_file=str(old))
    w._http.token = ""  # as if the stale token had been refused: register anew
    w.register()
    assert oct(old.stat().st_mode & 0o777) == "0o600" and old.read_text().strip() == w._http.token
    before = len(client.workers()["workers"])
    nowhere = Worker(server.url, queues=["q"], token_file="/proc/no-such-dir/token")
    with pytest.raises(OSError):
        nowhere.register()
    assert len(client.workers()["workers"]) == before, "a registration was spent on a token that could not be kept"


def test_keys_from_tether_worker_keygen(tether_bin, tmp_path):
    path = tmp_path / "worker.key"
    out = subprocess.run([tether_bin, "worker", "keygen", "--out", str(path)], capture_output=True, text=True, check=True)
    signer = Signer.from_file(str(path))
    assert signer.public_key in out.stdout + out.stderr
    copy = tmp_path / "copy.key"
    signer.to_file(str(copy))
    assert copy.read_text() == path.read_text() and oct(copy.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(FileExistsError):
        signer.to_file(str(copy))


def test_a_stop_while_the_server_is_away_is_a_clean_stop(server, transport):
    server.stop(signal.SIGKILL)
    w = Worker(server.url, queues=["away"], transport=transport)
    w.handle("t", lambda ctx: None)
    errors = []

    def run():
        try:
            w.run()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(1)  # it is trying to register meanwhile
    w.stop()
    t.join(30)
    assert not t.is_alive() and not errors, errors


def stop_process(proc: subprocess.Popen) -> None:
    """SIGSTOPs a process and waits until every thread of it has stopped: the stop takes a
    moment, in which a server may still answer a request."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while True:
        states = []
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            try:
                with open(f"/proc/{proc.pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:  # a thread that ended
                pass
        if all(state in ("T", "t") for state in states):
            return
        assert time.monotonic() < deadline, f"process {proc.pid} not stopped in 10 s: {states}"
        time.sleep(0.001)


KEEPING_WORKER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {sdk!r})
    from tether import Worker
    w = Worker({url!r}, queues=["kept"], transport={transport!r}, token_file={token!r}, results_dir={results!r})

    @w.handler()
    def job(ctx):
        print("started", flush=True)
        while not os.path.exists({go!r}):
            time.sleep(0.05)
        return {{"kept": True}}

    w.run()
""")


def test_a_result_kept_in_results_dir_outlives_the_worker(client, server, transport, tmp_path):
    sdk = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    results, go = tmp_path / "results", tmp_path / "go"
    script = KEEPING_WORKER.format(sdk=sdk, url=server.url, transport=transport, token=str(tmp_path / "token"),
                                   results=str(results), go=str(go))
    first = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    second = None
    try:
        job = client.submit("kept", "t", lease_ttl_seconds=60, max_attempts=1)
        assert first.stdout.readline().strip() == "started"
        stop_process(server.proc)  # the result cannot reach it now
        try:
            go.write_text("")
            deadline = time.monotonic() + 30
            while not list(results.glob("*.result.json")) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert list(results.glob("*.result.json")), "the result was never kept"
            first.kill()  # the worker dies with the result unsent
            first.wait(10)
        finally:
            server.proc.send_signal(signal.SIGCONT)
        second = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        done = client.wait(job["id"], timeout=60)
        assert done["status"] == "succeeded" and done["output"] == {"kept": True} and done["attempt"] == 1
        deadline = time.monotonic() + 10
        while list(results.glob("*.result.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not list(results.glob("*.result.json")), "a result the server took is still kept"
    finally:
        for p in (first, second):
            if p is not None:
                p.kill()


def test_a_cancelled_job_never_succeeds(client, make_worker):
    w = make_worker()
    started = threading.Event()

    @w.handler("sleep")
    def h(ctx):  # as ctx.cancelled's docstring says: check the flag, return
        started.set()
        end = time.time() + ctx.payload["s"]
        while time.time() < end:
            if ctx.cancelled:
                return {"stopped": True}
            time.sleep(0.05)
        return {"slept": ctx.payload["s"]}

    run_in_thread(w)
    job = client.submit("py", "sleep", {"s": 60}, lease_ttl_seconds=6)  # heartbeats every 2 s
    assert started.wait(30)
    client.cancel(job["id"])
    done = client.wait(job["id"], timeout=30)
    assert done["status"] == "cancelled" and done["output"] is None, done
    assert done["error"]["code"] == "cancelled" and "not kept" in done["error"]["message"]


def test_a_handler_that_returns_within_the_grace_completes(client, make_worker):
    w = make_worker(grace=30)
    started, finish = threading.Event(), threading.Event()

    @w.handler()
    def job(ctx):
        started.set()
        finish.wait(30)
        return {"cancelled": ctx.cancelled}

    t = run_in_thread(w)
    j = client.submit("py", "t", max_attempts=1)
    assert started.wait(30)
    w.stop()
    finish.set()
    t.join(30)
    assert not t.is_alive()
    done = client.wait(j["id"], timeout=30)
    assert done["status"] == "succeeded" and done["output"] == {"cancelled": False}


def test_a_release_backs_the_worker_off(client, make_worker):
    w = make_worker()
    leased = []
    twice = threading.Event()

    @w.handler()
    def not_now(ctx):
        leased.append(time.monotonic())
        if len(leased) == 2:
            twice.set()
        raise Release("not now")

    run_in_thread(w)
    job = client.submit("py", "t", max_attempts=2)
    assert twice.wait(30)
    # The pause after a release is 1 s, at least half of it: not eleven releases in 200 ms.
    assert leased[1] - leased[0] >= 0.5, leased
    released = [e["data"] for e in client.events(job["id"])["events"] if e["type"] == "job.lease_released"]
    assert released and released[0]["reason"] == "released" and released[0]["message"] == "not now", released
    assert not any(r.get("attempt_spent") for r in released), released


def test_a_release_reason_the_server_would_refuse_is_refused_here():
    with pytest.raises(ValueError):
        Release("x", reason="not now")
    assert Release("x", reason="gpu_busy").reason == "gpu_busy"


def test_a_value_that_is_not_json_raises_where_it_is_sent(client, make_worker):
    w = make_worker()

    @w.handler("event")
    def event(ctx):
        for bad in ({1, 2}, float("nan"), "\ud800", 10**400):
            try:
                ctx.progress(bad)
            except (TypeError, ValueError) as e:
                assert not isinstance(e, TetherError)
            else:
                raise AssertionError(f"{bad!r} was sent")
        return "refused here"

    @w.handler("output")
    def output(ctx):
        return {1, 2}

    @w.handler("huge")
    def huge(ctx):
        return {"n": 10**400}

    run_in_thread(w)
    ev = client.submit("py", "event", max_attempts=1)
    out = client.submit("py", "output", max_attempts=3)
    huge = client.submit("py", "huge", max_attempts=3)
    ev_done = client.wait(ev["id"], timeout=30)
    assert ev_done["status"] == "succeeded" and ev_done["output"] == "refused here", ev_done
    out_done = client.wait(out["id"], timeout=30)
    # Not JSON at every attempt: failed for good on the first, as the Go runner judges it.
    assert out_done["status"] == "failed" and out_done["dead_reason"] == "non_retryable", out_done
    assert out_done["error"]["code"] == "bad_output" and out_done["attempt"] == 1
    huge_done = client.wait(huge["id"], timeout=30)
    assert huge_done["status"] == "failed" and huge_done["error"]["code"] == "bad_output", huge_done


def test_the_pause_after_releases_doubles_and_a_completion_ends_it():
    w = Worker("http://127.0.0.1:9", queues=["py"])  # no server: nothing here sends
    w._report = lambda ctx, body, kind: w._done(ctx)
    outcome = {"release": True}

    @w.handler()
    def job(ctx):
        if outcome["release"]:
            raise Release("not now")
        return "done"

    def run_one():
        ctx = JobContext(w, {"job_id": "j", "lease_id": "l", "job_type": "t"})
        w._active[ctx.lease_id] = ctx
        w._run_job(ctx)
        return w._paused_until - time.monotonic()

    for n in (1, 2, 3, 4):  # 1 s, 2 s, 4 s, 8 s, each jittered over its upper half
        left = run_one()
        assert 2 ** (n - 1) / 2 - 0.1 <= left <= 2 ** (n - 1), (n, left)
    outcome["release"] = False
    run_one()
    outcome["release"] = True
    assert run_one() <= 1.0  # counted from the start again


@pytest.mark.parametrize("settings", [
    {"capacity": 0}, {"capacity": 1001}, {"capacity": "2"}, {"capacity": True}, {"capacity": 1.5},
    {"queues": "images"}, {"queues": []}, {"queues": ["a", ""]}, {"queues": [1]}, {"queues": [f"q{i}" for i in range(33)]},
    {"grace": -1}, {"grace": float("nan")}, {"grace": float("inf")}, {"grace": "10"},
])
def test_settings_the_server_would_refuse_are_refused_at_once(settings):
    # As `tether worker` refuses its flags: a clear ValueError where the mistake is, not a
    # TypeError deep inside, a refusal once run() starts, or queues=['i', 'm', ...].
    with pytest.raises(ValueError, match="tether: "):
        Worker("http://127.0.0.1:1", token="tw_x", **settings)
    Worker("http://127.0.0.1:1", token="tw_x", queues=("images",), capacity=1000, grace=0)


def test_a_lease_no_worker_got_is_put_back_after_a_restart(client, server, transport):
    """A lease written to a poll whose answer was lost does not outlive a restart: the worker,
    reconnecting, names at once the leases it holds, and the server puts back, unspent, the
    one it does not name. A job of max_attempts 1 then runs, well within the restart's
    lease_ttl of grace, instead of being dead-lettered without ever running."""
    reg = client.register_worker("lost", ["py"])
    j = client.submit("py", "t", max_attempts=1, lease_ttl_seconds=60)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/v1/worker/lease", body='{"max":1,"wait_seconds":5}',
                 headers={"Authorization": "Bearer " + reg["worker_token"], "Content-Type": "application/json"})
    assert j["id"] in conn.getresponse().read().decode()  # and then lost on the way
    conn.close()
    server.stop(signal.SIGKILL)
    server.start()
    w = Worker(server.url, token=reg["worker_token"], queues=["py"], transport=transport)
    w.handler()(lambda ctx: {"ran": True})
    run_in_thread(w)
    try:
        done = Client(server.url).wait(j["id"], timeout=30)
    finally:
        w.stop()
    assert done["status"] == "succeeded" and done["attempt"] == 1
    released = [e["data"] for e in Client(server.url).events(j["id"])["events"] if e["type"] == "job.lease_released"]
    assert [r["reason"] for r in released] == ["unacknowledged"]


SIGNAL_IN_WAIT_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {sdk!r})
    from tether import Worker
    w = Worker("http://127.0.0.1:9", queues=["q"], token="t", results_dir={results!r})
    w._catch_signals()
    # The main thread inside the stop flag's wait, holding its lock, when SIGTERM lands: the
    # handler runs right here, on this thread, before the next bytecode.
    with w._stopping._cond:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):
            pass
    print("stopping" if w._stopping.is_set() else "not stopping", flush=True)
""")


def test_sigterm_inside_the_stop_flags_wait_stops_the_worker(tmp_path):
    """A SIGTERM that lands while the main thread holds the stop flag's lock (inside a backoff's
    wait) stops the worker; on threading.Event it waited for the lock for ever (a worker that
    never exited, seen in CI when `kill $worker` and a second SIGTERM came together)."""
    sdk = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", SIGNAL_IN_WAIT_SCRIPT.format(sdk=sdk, results=str(tmp_path))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the worker's SIGTERM handler waited for the stop flag's lock, held by the thread it interrupted")
    assert proc.returncode == 0, err
    assert out.strip() == "stopping"


def test_stop_flag_wait():
    from tether.worker import _StopFlag
    f = _StopFlag()
    t0 = time.monotonic()
    assert f.wait(0.05) is False and time.monotonic() - t0 >= 0.05
    threading.Timer(0.05, f.set).start()
    assert f.wait(10) is True and f.is_set()
    assert f.wait() is True  # set: no wait at all
