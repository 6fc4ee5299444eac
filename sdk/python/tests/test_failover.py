"""A client and a worker of several servers (a replicated log's leader and standbys) go past a
server that is away or alive and silent (a paused process, a frozen VM, a hung disk: its kernel
still takes the connection), as the Go client does: real server, stand-ins for the others."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest

from tether import Client, TetherError, Worker


class Silent:
    """A socket that listens and never accepts, never reads: connections wait in its backlog, as
    a stopped process's do."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self):
        self.sock.close()


class StandIn:
    """A server's address in front of the real one: it forwards connections ("proxy"), answers
    every request as a standby naming ``leader`` ("standby"), or, paused, takes connections and
    goes silent on them, the ones it forwarded included, while the server behind loses those (a
    leader replaced while paused holds nothing of the new one's); killed, its address refuses
    them ("dead")."""

    def __init__(self, target_port: int, mode: str, leader: str = ""):
        self.target, self.mode, self.leader = target_port, mode, leader
        self.running = threading.Event()
        self.running.set()
        self.standby_answers = 0
        self.promote_after = 0  # answers as a standby, then forwards
        self.lock = threading.Lock()
        self.conns, self.upstream = [], []
        self.ln = socket.socket()
        self.ln.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ln.bind(("127.0.0.1", 0))
        self.ln.listen(64)
        self.url = f"http://127.0.0.1:{self.ln.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.ln.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(c)
                mode = self.mode
            if mode == "standby":
                threading.Thread(target=self._standby, args=(c,), daemon=True).start()
            elif mode == "proxy":
                out = socket.create_connection(("127.0.0.1", self.target))
                with self.lock:
                    self.conns.append(out)
                    self.upstream.append(out)
                threading.Thread(target=self._pipe, args=(c, out), daemon=True).start()
                threading.Thread(target=self._pipe, args=(out, c), daemon=True).start()
            # silent: left in the air

    def _pipe(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self.running.wait()  # paused: what comes is never passed on
                dst.sendall(data)
        except OSError:
            pass
        finally:
            if self.running.is_set():  # paused: the client's side stays open, and silent
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def _standby(self, c):
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = c.recv(65536)
                if not data:
                    return
                buf += data
            with self.lock:
                self.standby_answers += 1
                if self.promote_after and self.standby_answers >= self.promote_after:
                    self.mode = "proxy"
            body = json.dumps({"error": {"code": "STANDBY", "message": "a standby", "details": {"leader": self.leader}}}).encode()
            c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nTether-Leader: " +
                      self.leader.encode() + b"\r\nConnection: close\r\nContent-Length: " + str(len(body)).encode() +
                      b"\r\n\r\n" + body)
        finally:
            c.close()

    def pause(self):
        self.running.clear()
        with self.lock:
            self.mode = "silent"
            for c in self.upstream:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def kill(self):
        self.ln.close()
        with self.lock:
            for c in self.conns:
                c.close()

    def close(self):
        self.running.set()
        self.kill()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.fixture
def silent():
    s = Silent()
    yield s
    s.close()


@pytest.fixture
def stand_ins():
    made = []

    def make(server, mode, leader=""):
        s = StandIn(port_of(server.url), mode, leader)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def within(seconds: float, fn):
    """Runs fn, failing the test if it takes longer than seconds (a wait on a silent server);
    returns what it returned and how long it took."""
    out, err = [], []

    def run():
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            err.append(e)
    began = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    took = time.monotonic() - began
    assert not t.is_alive(), f"still waiting after {seconds} s: on a silent server"
    if err:
        raise err[0]
    return out[0], took


def test_client_goes_past_a_silent_first_server(server, silent):
    # A timeout of an hour: a client that waited on the silent server would fail `within`.
    c = Client(silent.url + "," + server.url, timeout=3600)
    job, took = within(10, lambda: c.submit("q", "t"))  # no idempotency key: it may not go twice
    assert job["status"] == "queued" and c.url == server.url
    assert within(10, lambda: c.get(job["id"]))[0]["id"] == job["id"]
    c.cancel(job["id"])
    events, _ = within(10, lambda: list(c.watch(job["id"])))
    assert events[-1]["type"] == "job.cancelled"


def test_client_follows_a_standby_to_the_leader(server, silent, stand_ins):
    standby = stand_ins(server, "standby", leader=server.url)
    c = Client(f"{silent.url},{standby.url},{server.url}", timeout=3600)
    c._http._current = 1  # as if the leader were not yet known: the standby first
    job, _ = within(10, lambda: c.submit("q", "t", idempotency_key="k"))
    assert c.url == server.url and job["id"]


def test_client_goes_past_a_paused_leader(server, stand_ins):
    """The leader pauses while the client talks to it: a request safe to repeat goes to the next
    server too after hedge_after, asks it again while it stands by, and is taken once it leads,
    the paused one still silent; one that is not safe to repeat goes only where a server
    answered lately, and is never sent to the silent one."""
    old = stand_ins(server, "proxy")
    nxt = stand_ins(server, "standby", leader=old.url)
    c = Client(old.url + "," + nxt.url, timeout=3600, hedge_after=0.2)
    first = c.submit("q", "t", idempotency_key="k0")
    assert c.url == old.url
    old.pause()
    nxt.promote_after = 3  # it takes over after it answered the hedged request as a standby twice
    job, took = within(20, lambda: c.submit("q", "t", idempotency_key="k1"))
    assert job["id"] != first["id"] and c.url == nxt.url and nxt.standby_answers >= 2
    job, _ = within(20, lambda: c.submit("q", "t"))
    assert job["status"] == "queued" and c.url == nxt.url


def test_unsafe_request_is_not_sent_to_a_silent_leader(server, stand_ins):
    old = stand_ins(server, "proxy")
    nxt = stand_ins(server, "standby", leader=old.url)
    c = Client(old.url + "," + nxt.url, timeout=3600, hedge_after=0.2)
    c.queues()
    old.pause()
    time.sleep(0.3)  # the fault: the leader has not answered for longer than hedge_after
    with pytest.raises(TetherError) as e:
        within(20, lambda: c.submit("q", "t"))
    assert e.value.code == "STANDBY"


@pytest.mark.parametrize("transport", ["websocket", "longpoll"])
def test_worker_goes_past_a_silent_first_server(server, silent, transport):
    c = Client(server.url)
    w = Worker(silent.url + "," + server.url, queues=["sq"], transport=transport)
    ran = threading.Event()

    @w.handler("t")
    def h(ctx):
        ran.set()
        return {"ok": True}

    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        job = c.submit("sq", "t")
        assert ran.wait(20), "the worker ran nothing: it waited on the silent server"
        assert c.wait(job["id"], timeout=20)["status"] == "succeeded"
    finally:
        w.stop()
        t.join(30)


@pytest.mark.parametrize("leader_end", ["dead", "paused"])
def test_worker_reconnects_past_a_silent_server_after_a_failover(server, silent, stand_ins, caplog, leader_end):
    """The leader dies, or pauses, while the next server in the worker's list is silent: the
    worker reconnects to the server that takes over, as soon as it leads, and runs jobs there.
    A paused leader is left when a heartbeat goes unanswered (a lease of 5 s: every 1.7 s)."""
    caplog.set_level(logging.INFO, logger="tether.worker")
    old = stand_ins(server, "proxy")
    nxt = stand_ins(server, "standby", leader=old.url)
    c = Client(server.url)
    w = Worker(f"{old.url},{silent.url},{nxt.url}", queues=["fq"], transport="websocket")
    ran, release = [], threading.Event()

    @w.handler("t")
    def h(ctx):
        ran.append(ctx.id)
        if ctx.payload.get("hold"):
            release.wait(30)
        return {}

    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        first = c.submit("fq", "t", {"hold": True}, lease_ttl_seconds=5)
        deadline = time.monotonic() + 20
        while first["id"] not in ran and time.monotonic() < deadline:
            time.sleep(0.02)
        assert first["id"] in ran
        if leader_end == "dead":
            old.kill()
        else:
            old.pause()
        nxt.promote_after = 1
        release.set()
        led = time.monotonic()
        job = c.submit("fq", "t")
        deadline = led + 20
        while job["id"] not in ran and time.monotonic() < deadline:
            time.sleep(0.02)
        assert job["id"] in ran, "the worker ran nothing after the failover"
        # Waiting on the silent server costs its handshake timeout (10 s); going past it, a
        # hedge (1 s), and for a paused leader two heartbeats' time (3.4 s) to find it silent.
        took = time.monotonic() - led
        assert took < 8, f"the worker ran a job {took:.1f} s after the new leader led: it waited on a silent server"
        if leader_end == "paused":
            assert "did not answer a heartbeat" in caplog.text
    finally:
        w.stop()
        t.join(30)
