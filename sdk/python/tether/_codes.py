"""The server's error codes: (HTTP status, whether the same request may pass later).

Generated from wire.ErrorCodes (transport/wire/codes.go) and eventlog.ServerReleaseReasons by
`go test ./transport/wire -run PythonCodes -update`; a test fails when it differs.
"""

CODES = {
    "INVALID_ARGUMENT": (400, False),
    "INVALID_JSON": (400, False),
    "SIGNATURE_INVALID": (400, False),
    "BAD_HANDSHAKE": (400, False),
    "UNAUTHENTICATED": (401, False),
    "TOKEN_EXPIRED": (401, False),
    "PERMISSION_DENIED": (403, False),
    "WORKER_REVOKED": (403, False),
    "ENROLL_TOKEN_USED_UP": (403, False),
    "CROSS_SITE_REQUEST": (403, False),
    "HOST_NOT_ALLOWED": (403, False),
    "ORIGIN_NOT_ALLOWED": (403, False),
    "INVALID_FLOW": (400, False),
    "NOT_FOUND": (404, False),
    "INVALID_SCHEDULE": (400, False),
    "SCHEDULE_NOT_FOUND": (404, False),
    "FLOW_NOT_FOUND": (404, False),
    "JOB_NOT_FOUND": (404, False),
    "WORKER_NOT_FOUND": (404, False),
    "RATE_LIMIT_NOT_FOUND": (404, False),
    "RESERVATION_NOT_FOUND": (404, False),
    "API_KEY_NOT_FOUND": (404, False),
    "METHOD_NOT_ALLOWED": (405, False),
    "LEASE_MISMATCH": (409, False),
    "ALREADY_TERMINAL": (409, False),
    "NOT_DEAD_LETTERED": (409, False),
    "JOB_EXPIRED": (410, False),
    "HISTORY_GONE": (410, False),
    "FLOW_ENDED": (409, False),
    "SCHEDULE_EXISTS": (409, False),
    "FLOW_STEP": (409, False),
    "JOB_NOT_FINISHED": (409, False),
    "COMPLETION_CONFLICT": (409, False),
    "SESSION_CLOSED": (409, False),
    "PAYLOAD_TOO_LARGE": (413, False),
    "UNSUPPORTED_MEDIA_TYPE": (415, False),
    "IDEMPOTENCY_KEY_REUSED": (422, False),
    "QUOTA_EXCEEDED": (429, False),
    "TOKEN_RENEWED_RECENTLY": (429, True),
    "INTERNAL": (500, True),
    "UNAVAILABLE": (503, True),
    "NOT_READY": (503, True),
    "STANDBY": (503, True),
}

#: The release reasons that are the server's own, which no worker may give.
SERVER_RELEASE_REASONS = ("undelivered", "unacknowledged")
