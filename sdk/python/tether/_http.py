"""One HTTP/1.1 connection per thread to one server, with tether's error answers turned into
TetherError. The standard library only."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterator, Optional, Tuple

from . import _ijson
from .errors import TLS_ERROR, UNREACHABLE, TetherError

USER_AGENT = "tether-python/0.1"

#: Seconds a request waits for an answer beyond what it asks the server to wait (a long poll).
REQUEST_TIMEOUT = 30.0

#: A kept-alive connection idle this long is not used again: the server closes idle ones after
#: two minutes, and a request on one it just closed may or may not have been read.
IDLE_REUSE_MAX = 60.0

#: Methods that may be sent again when a kept-alive connection turns out closed: the request
#: may have reached the server, and these do the same thing twice.
_SAFE_AGAIN = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class HTTP:
    """Requests to one server. Thread-safe: each thread keeps its own keep-alive connection."""

    def __init__(self, url: str, token: str = "", timeout: float = REQUEST_TIMEOUT,
                 ssl_context: Optional[ssl.SSLContext] = None):
        u = urllib.parse.urlsplit(url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"tether: the server URL must be http(s)://host[:port], got {url!r}")
        self.url = f"{u.scheme}://{u.netloc}"
        self._scheme, self._host, self._port = u.scheme, u.hostname, u.port
        self._prefix = u.path
        self.token = token
        self.timeout = timeout
        self._ssl = ssl_context
        self._local = threading.local()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        c = getattr(self._local, "conn", None)
        if c is not None and time.monotonic() - getattr(self._local, "used", 0.0) > IDLE_REUSE_MAX:
            self._drop()
            c = None
        if c is None:
            c = self._new_connection(timeout)
            self._local.conn = c
        c.timeout = timeout
        if c.sock is not None:
            c.sock.settimeout(timeout)
        return c

    def _drop(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    def request(self, method: str, path: str, body: Any = None, *, raw: Optional[bytes] = None,
                content_type: str = "application/json", headers: Optional[Dict[str, str]] = None,
                timeout: Optional[float] = None, token: Optional[str] = None,
                again: bool = False) -> Tuple[int, Any]:
        """Sends one request and returns (status, decoded JSON answer or None). ``again`` says
        the request does the same thing twice (a worker's numbered event, a result, a poll), so
        it may be sent again when a kept-alive connection turns out closed; GET, PUT and DELETE
        may always."""
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
        resp, payload = self._send(method, self._prefix + path, data, h, timeout or self.timeout,
                                   again or method in _SAFE_AGAIN)
        status = resp.status
        check_status(method, path, resp, payload)
        if status == 204 or not payload:
            return status, None
        try:
            return status, json.loads(payload)
        except ValueError as e:
            raise TetherError("INVALID_ANSWER", f"{method} {path}: the answer is not JSON: {e}", status) from e

    def _send(self, method: str, path: str, data: Optional[bytes], headers: Dict[str, str],
              timeout: float, again: bool) -> Tuple[http.client.HTTPResponse, bytes]:
        # A kept-alive connection the server closed meanwhile fails at once: one more try on a
        # fresh connection, for a request that may be sent twice.
        for fresh in (False, True):
            conn = self._connection(timeout)
            reused = conn.sock is not None
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                self._local.used = time.monotonic()
                if resp.getheader("Connection", "").lower() == "close":
                    self._drop()
                return resp, payload
            except ssl.SSLError as e:
                self._drop()
                raise TetherError(TLS_ERROR, f"{method} {path}: {e}") from e
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop()
                if reused and not fresh and again and not self.aborted():
                    continue
                raise TetherError(UNREACHABLE, f"{method} {path}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                raise TetherError(UNREACHABLE, f"{method} {path}: {e}") from e
            except BaseException:
                # Anything else (a header http.client refuses, an interrupt) may leave the
                # connection between a request and its answer: the next request gets a new one.
                self._drop()
                raise
        raise AssertionError("unreachable")

    def aborted(self) -> bool:
        """Whether requests in flight were cut short on purpose (a worker that stops)."""
        return False

    def _new_connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=self._ssl or ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def stream(self, path: str, headers: Dict[str, str], timeout: float) -> Iterator[str]:
        """GETs path on a connection of its own and yields the answer's lines (an SSE stream)."""
        conn = self._new_connection(timeout)
        h = {"User-Agent": USER_AGENT}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(headers)
        try:
            try:
                conn.request("GET", self._prefix + path, headers=h)
                resp = conn.getresponse()
            except ssl.SSLError as e:
                raise TetherError(TLS_ERROR, f"GET {path}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                raise TetherError(UNREACHABLE, f"GET {path}: {e}") from e
            check_status("GET", path, resp, resp.read() if resp.status >= 300 else b"")
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    raise TetherError(UNREACHABLE, f"GET {path}: {e}") from e
                if not line:
                    return
                yield line.decode("utf-8").rstrip("\r\n")
        finally:
            conn.close()


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
