// Package policy holds the Go worker SDK's decisions that need no connection, no clock and no
// randomness of their own: what becomes of a result after each send, when to send it again, how
// long a lease may still be valid, and how often to heartbeat. transport/client runs them over
// its links; the simulator's workers (sim/worker.go) run them too, so the simulator proves the
// SDK's rules, not a copy of them. It imports transport/wire alone.
//
// A result (a complete, fail or release) is kept, on disk with Worker.ResultsDir, from before
// its first send until the server has it or refused it for good (docs/design.md §10, "nothing
// finished is dropped"). After each send (Sends.After):
//
//  1. An answer that may pass (none came; a code the table marks Retry: UNAVAILABLE, NOT_READY,
//     STANDBY, ...; a 5xx or 429 with no tether code, a proxy's) sends the same result again,
//     after Backoff, while its lease may be valid (MayBeValid: a server that restarts gives every
//     lease one more TTL), and once more after that; then it is given up (RESULT_DROPPED): the
//     job runs again elsewhere.
//  2. A completion refused for what it is (PAYLOAD_TOO_LARGE, INVALID_ARGUMENT, INVALID_JSON,
//     SIGNATURE_INVALID) would be refused again however often it were sent: it is replaced by the
//     failure that names the reason, which is kept and sent by these same rules.
//  3. Any other answer ends the result: the server took it (a repeat of an accepted completion
//     is taken again), or refused it for good (LEASE_MISMATCH: the lease is no longer the
//     worker's).
package policy
