"""Fixtures: a real tether server (the binary `make test` builds, or $TETHER_BIN), on a
temporary data dir and a free loopback port."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "sdk" / "python"))

ADMIN_TOKEN = "py-admin-token-0123456789"


@pytest.fixture(scope="session")
def tether_bin(tmp_path_factory) -> str:
    path = os.environ.get("TETHER_BIN")
    if path:
        return path
    out = tmp_path_factory.mktemp("bin") / "tether"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/tether"], cwd=ROOT, check=True)
    return str(out)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A tether server process; start() again after stop() restarts it on the same data dir
    and port."""

    def __init__(self, binary: str, data: str, *args: str):
        self.binary, self.data, self.args = binary, data, list(args)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.log = open(os.path.join(data + ".log"), "ab")

    def start(self) -> "Server":
        self.proc = subprocess.Popen([self.binary, "server", "--data", self.data, "--addr",
                                      f"127.0.0.1:{self.port}", *self.args],
                                     stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while True:  # ready once /readyz answers 200: it has rebuilt its views from the log
            if self.proc.poll() is not None:
                raise RuntimeError(f"tether server exited {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("tether server not ready in 30 s")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)


@pytest.fixture
def server(tether_bin, tmp_path):
    s = Server(tether_bin, str(tmp_path / "data")).start()
    yield s
    s.stop(signal.SIGKILL)


@pytest.fixture
def auth_server(tether_bin, tmp_path):
    s = Server(tether_bin, str(tmp_path / "data"), "--auth", "token", "--admin-token", ADMIN_TOKEN).start()
    yield s
    s.stop(signal.SIGKILL)


@pytest.fixture
def client(server):
    from tether import Client
    return Client(server.url)
