// Package transport is tether's network shell: the HTTP API, the WebSocket and long-poll worker
// endpoints, SSE, authentication, and the operations endpoints (docs/design.md §5). It translates
// requests into calls on the broker through the Core interface (actors/broker.Broker in a
// server) and reads views from the projections through it; it holds no decision logic and
// never touches the store or the event log directly (docs/design.md §1).
//
// Contract:
//   - Every error has the shape of wire.Error, with a stable code from the one table of codes
//     (wire.ErrorCodes), which gives its HTTP status and its WebSocket close code.
//   - Nothing client- or worker-controlled is unbounded: bodies (SmallBodyBytesMax, a payload
//     or an output plus an envelope, BatchBodyBytesMax), headers (HeaderBytesMax), frames
//     (FrameBytesMax), unanswered operations per WebSocket (InFlightMax), long-poll waits
//     (WaitSecondsMax), list pages, result TTLs and purge ages (actors.ResultTTLMax), purges
//     (actors.PurgeLimit a call), connections (LimitListener), and how deep JSON nests
//     (wire.JSONDepthMax).
//   - Bodies and frames are checked whole before they are decoded (checkJSON): not UTF-8, too
//     deep, a key twice in one object at any level, or not I-JSON (RFC 7493: a number past a
//     double's range, a lone surrogate) is 400 INVALID_JSON naming the place, and over WebSocket
//     a close with 1007, as for a frame that is not JSON. What is stored then reads back the
//     same in any client.
//   - A tenant's job that finished and left the views answers 410 JOB_EXPIRED; any other
//     tenant's, and one that never was, 404 JOB_NOT_FOUND.
//   - Credentials travel in the Authorization header (or X-API-Key), never in a query string;
//     they are compared as hashes, the admin token in constant time, and never logged.
//   - A state-changing answer carries the receipt (seq, hash) of the last event it caused, and
//     is written only after that event is durable.
//   - A WebSocket connection sends a worker's operations to the broker in the order it read
//     them and keeps reading while they are made durable; acks come back as they are answered.
//   - Capacity is offered only while someone is there to take it: a WebSocket worker's credit
//     lasts as long as its socket, a long-poll worker's as long as one of its polls waits
//     (poll.go, which drives the offer protocol's one state machine, transport/longpoll, as the
//     simulator does). An assignment that was not written to the worker (the socket died first, the
//     poll's client went away, its answer could not be written) goes back to the queue at once,
//     with no attempt spent (Core.ReturnUndelivered).
//   - A long-poll worker's heartbeats and results never wait for its poll; a newer poll ends
//     the older one.
//   - A client that goes away before its answer is logged at debug level, not as an error.
//   - A body must be declared JSON (application/json, or +json): a web page can send any other
//     type to any site without asking first (415 UNSUPPORTED_MEDIA_TYPE). A state-changing
//     request a browser marks Sec-Fetch-Site: cross-site is refused (403 CROSS_SITE_REQUEST).
//     Under AuthNone, where no credential stands between a page and the API, the Host must be a
//     loopback name or address (403 HOST_NOT_ALLOWED: DNS rebinding) and any Origin the
//     server's own (403 ORIGIN_NOT_ALLOWED). /healthz and /readyz are exempt.
//   - /metrics names tenants and queues: under AuthToken it needs the admin token or the
//     metrics token; MetricsHandler serves it with no credential for a loopback listener, to a
//     loopback Host only.
//
// Subpackages: wire holds the wire contract's types; client is the Go client for submitters and
// workers.
package transport
