// Package transport is tether's network shell: the HTTP API, the WebSocket and long-poll worker
// endpoints, SSE, authentication, and the operations endpoints (DESIGN §5). It translates
// requests into calls on the broker facade (actors/runtime) and reads views from the
// projections; it holds no decision logic and never touches the store directly (DESIGN §1).
//
// Contract:
//   - Every error has the shape of wire.Error, with a stable code; each broker rejection code
//     maps to one HTTP status (statusOf).
//   - Nothing client- or worker-controlled is unbounded: bodies (SmallBodyBytesMax, a payload
//     or an output plus an envelope, BatchBodyBytesMax), headers (HeaderBytesMax), frames
//     (FrameBytesMax), unanswered operations per WebSocket (InFlightMax), long-poll waits
//     (WaitSecondsMax), list pages, and connections (LimitListener).
//   - Credentials travel in the Authorization header (or X-API-Key), never in a query string;
//     they are compared as hashes, the admin token in constant time, and never logged.
//   - A state-changing answer carries the receipt (seq, hash) of the last event it caused, and
//     is written only after that event is durable.
//   - A WebSocket connection sends a worker's operations to the broker in the order it read
//     them and keeps reading while they are made durable; acks come back as they are answered.
//
// Subpackages: wire holds the wire contract's types; client is the Go client for submitters and
// workers.
package transport
