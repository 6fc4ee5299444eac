"""The client: jobs, flows, schedules, reservations and the admin API, over HTTP."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import ssl
import time
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from ._http import HEDGE_AFTER, HTTP, REQUEST_TIMEOUT, quote
from .errors import TetherError

Job = Dict[str, Any]

#: How long a watch waits for a line of its stream (the server sends a keep-alive every 15 s).
STREAM_IDLE_MAX = 60.0
#: How long a watch keeps resuming a stream that broke before it gives up.
WATCH_RESUME_FOR = 120.0


def _job_request(queue: str, type: str, payload: Any = None, *, priority: Optional[int] = None,
                 delay_seconds: Optional[float] = None, run_at: Union[None, str, _dt.datetime] = None,
                 max_attempts: Optional[int] = None, lease_ttl_seconds: Optional[float] = None,
                 labels: Optional[Dict[str, str]] = None, idempotency_key: Optional[str] = None,
                 reservation_id: Optional[str] = None, result_ttl_seconds: Optional[float] = None,
                 concurrency_key: Optional[str] = None,
                 rate_limits: Optional[Sequence[Union[str, Dict[str, str]]]] = None) -> Dict[str, Any]:
    req: Dict[str, Any] = {"queue": queue, "type": type}
    if payload is not None:
        req["payload"] = payload
    if isinstance(run_at, _dt.datetime):
        if run_at.tzinfo is None:
            raise ValueError("tether: run_at must be an aware datetime (with a time zone)")
        run_at = run_at.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")
    for k, v in (("priority", priority), ("delay_seconds", delay_seconds), ("run_at", run_at),
                 ("max_attempts", max_attempts), ("lease_ttl_seconds", lease_ttl_seconds),
                 ("labels", labels), ("idempotency_key", idempotency_key),
                 ("reservation_id", reservation_id), ("result_ttl_seconds", result_ttl_seconds),
                 ("concurrency_key", concurrency_key)):
        if v is not None:
            req[k] = v
    if rate_limits:
        req["rate_limits"] = [{"name": r} if isinstance(r, str) else dict(r) for r in rate_limits]
    return req


# A W3C traceparent as a header may carry it: version-traceid-parentid-flags, lowercase hex, and
# for a later version more fields after a dash. Anything else is not sent (the server would ignore
# it; a CR or LF would not even make a header).
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[\x21-\x7e]*)?")


def _trace(traceparent: str) -> Optional[Dict[str, str]]:
    if not traceparent or not _TRACEPARENT.fullmatch(traceparent):
        return None
    return {"traceparent": traceparent}


class Client:
    """A client of a tether server, with an API key (or none under ``--auth none``), or the
    admin token for the admin calls. Thread-safe.

    ``url`` may name the several servers of a replicated log, comma-separated (or a sequence):
    the client finds the leader among them, and goes past a server that is away, a standby,
    starting, or alive and silent (paused), by the Go client's rules (``tether._http``): a
    request safe to repeat (a read, a submit under an idempotency key, a cancel) that has no
    answer after ``hedge_after`` seconds goes to the next server too; one that is not goes only
    to a server that answered within ``hedge_after``, and never twice.

    Every call raises :class:`tether.TetherError` when the server refuses it (its stable
    ``code``, ``status``, ``request_id``, ``retryable``) or cannot be reached (``UNREACHABLE``).
    """

    job_request = staticmethod(_job_request)

    def __init__(self, url: Union[str, Sequence[str]] = "", api_key: str = "", *,
                 timeout: float = REQUEST_TIMEOUT, ssl_context: Optional[ssl.SSLContext] = None,
                 hedge_after: float = HEDGE_AFTER):
        url = url or os.environ.get("TETHER_SERVER", "http://127.0.0.1:8080")
        api_key = api_key or os.environ.get("TETHER_API_KEY", "")
        self._http = HTTP(url, api_key, timeout, ssl_context, hedge_after)

    @property
    def url(self) -> str:
        """The server the client talks to now."""
        return self._http.url

    def _do(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return self._http.request(method, path, body, **kw)[1]

    # Jobs.

    def submit(self, queue: str, type: str, payload: Any = None, *, traceparent: str = "",
               **options: Any) -> Job:
        """Submits a job and returns it (``idempotent_hit`` is set when an idempotency key
        found the original). Options: priority, delay_seconds, run_at (RFC 3339 or an aware
        datetime), max_attempts, lease_ttl_seconds, labels, idempotency_key, reservation_id,
        result_ttl_seconds, concurrency_key, rate_limits (names, or {name, key}).
        ``traceparent`` (W3C) is the trace the job continues: its worker gets it."""
        return self._do("POST", "/v1/jobs", _job_request(queue, type, payload, **options),
                        headers=_trace(traceparent))

    def submit_batch(self, jobs: Iterable[Dict[str, Any]], *, traceparent: str = "") -> List[Job]:
        """Submits jobs all or none; each is a dict as :meth:`job_request` makes."""
        return self._do("POST", "/v1/jobs/batch", {"jobs": list(jobs)}, headers=_trace(traceparent))["jobs"]

    def get(self, job_id: str) -> Job:
        return self._do("GET", "/v1/jobs/" + quote(job_id))

    def explain(self, job_id: str) -> Dict[str, Any]:
        """Why a job is not running, whom it runs on, or how it ended: a stable code and details."""
        return self._do("GET", "/v1/jobs/" + quote(job_id) + "/explain")

    def list(self, *, status: str = "", queue: str = "", type: str = "", label: str = "",
             limit: int = 0, cursor: str = "", newest: bool = False) -> Dict[str, Any]:
        """One page of jobs: ``{"jobs": [...], "next_cursor": "..."}`` (no cursor on the last)."""
        q = {k: v for k, v in (("status", status), ("queue", queue), ("type", type),
                               ("label", label), ("cursor", cursor)) if v}
        if limit:
            q["limit"] = str(limit)
        if newest:
            q["order"] = "newest"
        return self._do("GET", "/v1/jobs?" + urllib.parse.urlencode(q))

    def iter_jobs(self, *, cursor: str = "", **filters: Any) -> Iterator[Job]:
        """Every job the filters of :meth:`list` match, page after page (from ``cursor``)."""
        while True:
            page = self.list(cursor=cursor, **filters)
            yield from page.get("jobs") or []
            cursor = page.get("next_cursor") or ""
            if not cursor:
                return

    def cancel(self, job_id: str) -> Job:
        """Cancels a job: at once if it waits, by request to its worker if it is leased."""
        return self._do("POST", "/v1/jobs/" + quote(job_id) + "/cancel")

    def retry(self, job_id: str) -> Job:
        """Re-drives a dead-lettered job with a fresh attempt budget."""
        return self._do("POST", "/v1/jobs/" + quote(job_id) + "/retry")

    def delete(self, job_id: str) -> Dict[str, Any]:
        """Takes a finished job out of every view now."""
        return self._do("DELETE", "/v1/jobs/" + quote(job_id))

    def events(self, job_id: str, after: int = 0) -> Dict[str, Any]:
        """One page of a job's events after number ``after``: ``{"events": [...], "done": bool}``."""
        return self._do("GET", f"/v1/jobs/{quote(job_id)}/events?after={int(after)}")

    def watch(self, job_id: str, after: int = 0) -> Iterator[Dict[str, Any]]:
        """Yields a job's events after number ``after`` as they happen (SSE), until the job is
        terminal. A broken stream is resumed with Last-Event-ID: no gap, no repeat."""
        return self._watch("/v1/jobs/" + quote(job_id) + "/events", after)

    def wait(self, job_id: str, timeout: Optional[float] = None) -> Job:
        """Waits until the job is terminal and returns it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in self._watch("/v1/jobs/" + quote(job_id) + "/events", 0, deadline):
            pass
        return self.get(job_id)

    def _watch(self, path: str, after: int, deadline: Optional[float] = None) -> Iterator[Dict[str, Any]]:
        failures, broken_since = 0, None
        while True:
            headers = {"Accept": "text/event-stream"}
            if after > 0:
                headers["Last-Event-ID"] = str(after)
            # The stream is quiet between events but for the server's keep-alive every 15 s:
            # a read waits longer than that, whatever the client's request timeout.
            timeout = STREAM_IDLE_MAX
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    raise TetherError("TIMEOUT", f"GET {path}: still not ended")
            event, data = "", []
            try:
                for line in self._http.stream(path, headers, timeout):
                    if line == "":
                        if event == "done":
                            return
                        if data:
                            e = json.loads("\n".join(data))
                            yield e
                            after, failures, broken_since = e.get("number", after), 0, None
                        event, data = "", []
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].lstrip(" "))
            except TetherError as e:
                if e.code != "UNREACHABLE":
                    raise
            except (OSError, ValueError):
                pass
            # The stream broke (or the server ended it without "done"): resume where it was, for
            # as long as a server's restart or failover takes.
            failures += 1
            broken_since = broken_since or time.monotonic()
            if time.monotonic() - broken_since > WATCH_RESUME_FOR:
                raise TetherError("UNREACHABLE", f"GET {path}: the event stream has been broken for {WATCH_RESUME_FOR:.0f} s")
            time.sleep(min(5.0, 0.1 * 2 ** min(failures, 6)))

    # Reservations, quota, queues, workers.

    def reserve(self, ttl_seconds: float = 0) -> Dict[str, Any]:
        body = {"ttl_seconds": ttl_seconds} if ttl_seconds else {}
        return self._do("POST", "/v1/reservations", body)

    def release(self, reservation_id: str) -> None:
        self._do("POST", "/v1/reservations/" + quote(reservation_id) + "/release")

    def quota(self) -> Dict[str, Any]:
        return self._do("GET", "/v1/quota")

    def queues(self) -> Dict[str, Any]:
        return self._do("GET", "/v1/queues")

    def workers(self) -> Dict[str, Any]:
        return self._do("GET", "/v1/workers")

    def register_worker(self, name: str, queues: Sequence[str], *, capacity: int = 1,
                        enroll_token: str = "", public_key: str = "",
                        labels: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """Registers a worker with an enroll token (none under ``--auth none``); the answer's
        ``worker_token`` is shown only here."""
        body: Dict[str, Any] = {"name": name, "queues": list(queues), "capacity": capacity}
        if public_key:
            body["public_key"] = public_key
        if labels:
            body["labels"] = labels
        return self._do("POST", "/v1/workers/register", body, token=enroll_token)

    def revoke_worker(self, worker_id: str) -> None:
        self._do("DELETE", "/v1/workers/" + quote(worker_id))

    # Rate limits.

    def set_rate_limit(self, name: str, rate: float, burst: int = 0) -> Dict[str, Any]:
        body: Dict[str, Any] = {"rate": rate}
        if burst:
            body["burst"] = burst
        return self._do("PUT", "/v1/rate-limits/" + quote(name), body)

    def delete_rate_limit(self, name: str) -> Dict[str, Any]:
        return self._do("DELETE", "/v1/rate-limits/" + quote(name))

    def rate_limits(self) -> Dict[str, Any]:
        return self._do("GET", "/v1/rate-limits")

    # Flows.

    def submit_flow(self, flow: Union[str, bytes, os.PathLike], name: str = "",
                    idempotency_key: str = "", traceparent: str = "") -> Dict[str, Any]:
        """Submits a flow: its YAML text, or the path of its file (then ``name`` defaults to
        the file's name without extension)."""
        if isinstance(flow, os.PathLike) or (isinstance(flow, str) and "\n" not in flow
                                              and os.path.isfile(flow)):
            path = os.fspath(flow)
            with open(path, "rb") as f:
                text = f.read()
            name = name or os.path.splitext(os.path.basename(path))[0]
        else:
            text = flow.encode() if isinstance(flow, str) else flow
        headers = _trace(traceparent) or {}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        q = "?name=" + urllib.parse.quote(name, safe="") if name else ""
        return self._do("POST", "/v1/flows" + q, raw=text, content_type="application/yaml",
                        headers=headers)

    def flow(self, flow_id: str) -> Dict[str, Any]:
        return self._do("GET", "/v1/flows/" + quote(flow_id))

    def flows(self, *, status: str = "", cursor: str = "", limit: int = 0) -> Dict[str, Any]:
        q = {k: v for k, v in (("status", status), ("cursor", cursor)) if v}
        if limit:
            q["limit"] = str(limit)
        return self._do("GET", "/v1/flows?" + urllib.parse.urlencode(q))

    def cancel_flow(self, flow_id: str) -> Dict[str, Any]:
        return self._do("POST", "/v1/flows/" + quote(flow_id) + "/cancel")

    def watch_flow(self, flow_id: str, after: int = 0) -> Iterator[Dict[str, Any]]:
        """Yields a flow's events and its steps' jobs' lifecycle events until it has ended."""
        return self._watch("/v1/flows/" + quote(flow_id) + "/events", after)

    # Schedules.

    def create_schedule(self, name: str, cron: str, job: Dict[str, Any], *, timezone: str = "",
                        overlap: str = "", catch_up: str = "") -> Dict[str, Any]:
        """Creates a schedule that fires ``job`` (a dict as :meth:`job_request` makes) on a cron
        expression; creating the same schedule again returns it."""
        body: Dict[str, Any] = {"name": name, "cron": cron, "job": job}
        for k, v in (("timezone", timezone), ("overlap", overlap), ("catch_up", catch_up)):
            if v:
                body[k] = v
        return self._do("POST", "/v1/schedules", body)

    def schedule(self, schedule_id: str) -> Dict[str, Any]:
        return self._do("GET", "/v1/schedules/" + quote(schedule_id))

    def schedules(self) -> List[Dict[str, Any]]:
        return self._do("GET", "/v1/schedules")["schedules"]

    def pause_schedule(self, schedule_id: str) -> Dict[str, Any]:
        return self._do("POST", "/v1/schedules/" + quote(schedule_id) + "/pause")

    def resume_schedule(self, schedule_id: str) -> Dict[str, Any]:
        return self._do("POST", "/v1/schedules/" + quote(schedule_id) + "/resume")

    def delete_schedule(self, schedule_id: str) -> Dict[str, Any]:
        return self._do("DELETE", "/v1/schedules/" + quote(schedule_id))

    # Admin (the client's key must be the admin token).

    def create_api_key(self, tenant: str) -> Dict[str, Any]:
        return self._do("POST", "/v1/admin/api-keys", {"tenant": tenant})

    def revoke_api_key(self, key_id: str) -> None:
        self._do("DELETE", "/v1/admin/api-keys/" + quote(key_id))

    def create_enroll_token(self, tenant: str, uses: int = 1, ttl_seconds: float = 3600) -> Dict[str, Any]:
        return self._do("POST", "/v1/admin/enroll-tokens",
                        {"tenant": tenant, "uses": uses, "ttl_seconds": ttl_seconds})

    def set_quota(self, tenant: str, *, max_active: Optional[int] = None,
                  max_running: Optional[int] = None,
                  max_running_per_key: Optional[int] = None) -> Dict[str, Any]:
        body = {k: v for k, v in (("max_active", max_active), ("max_running", max_running),
                                  ("max_running_per_key", max_running_per_key)) if v is not None}
        return self._do("PATCH", "/v1/admin/tenants/" + quote(tenant) + "/quota", body)
