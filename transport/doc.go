// Package transport is tether's network shell: the HTTP API, the WebSocket and long-poll worker
// endpoints, SSE, authentication, and the operations endpoints. It translates requests into
// commands for the actors and reads views from the projections; it holds no decision logic and
// never touches the store directly (DESIGN §1, §5).
//
// So far it serves the operations endpoints (/healthz, /readyz); the API arrives with the
// transport issue.
package transport
