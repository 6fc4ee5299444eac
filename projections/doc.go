// Package projections holds the views of the event log: job snapshots, the queue of waiting
// jobs, active leases, tenant quotas and reservations, workers and their sessions, dead letters,
// idempotency keys and counters.
//
// All of them live in one Set, a pure fold: Set.Apply(seq, time, payload) in seq order, with no
// clock, I/O or goroutines. Two rules hold, and tests and `tether replay` check them:
//
//  1. A checkpoint plus the tail after it equals a full replay (MarshalCheckpoint of both gives
//     the same bytes).
//  2. The live Set, fed the payloads the runtime appended, equals a replay of the log, fed the
//     decoded records.
//
// Time enters only as the record's time or as a `now` argument to a query: a scheduled job whose
// run_at has passed reads as queued without any event, and idempotency keys expire by record
// time. A finished job leaves the Set only by its job.expired; the retention index orders the
// finished jobs by when a Retention (the server's policy, not in the log) makes them due.
// The package imports eventlog only.
package projections
