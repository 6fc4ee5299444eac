// Package projections holds the views of the event log: job snapshots, the queue of waiting
// jobs, active leases, tenant quotas and reservations, workers and their sessions, dead letters,
// idempotency keys and counters.
//
// All of them live in one Set, a pure fold: Set.Apply(seq, time, payload) in seq order, with no
// clock, goroutines or writes. Two rules hold, and tests, the simulator and `tether replay`
// check them (MarshalFold of both gives the same bytes):
//
//  1. A checkpoint, with the table saved with it, plus the tail after it equals a full replay.
//  2. The live Set, fed the payloads the runtime appended, equals a replay of the log, fed the
//     decoded records.
//
// # Live state in memory, history on disk
//
// A Set holds in memory what is live — waiting, scheduled and leased jobs, tenants, quotas,
// reservations, workers, idempotency keys, counters — and the jobs that finished since the last
// checkpoint. The other finished jobs, and their list and retention indexes, are in a Store: on
// a server, the table the log keeps beside its checkpoint (eventlog.Views), which only a
// checkpoint writes, in the same atomic change:
//
//	commit ──► Apply (memory) ──► BeginFlush (copy of the live state, the jobs that changed)
//	                                  │ off the commit path
//	                                  ▼
//	               Encode ──► eventlog.SaveCheckpoint(live state + table writes, one ingestion)
//	                                  │
//	                                  ▼
//	               EndFlush: memory lets go of the finished jobs the table now holds
//
// So memory, a checkpoint, shutdown and start-up cost what is live and what finished since the
// last checkpoint, never the history, and a read of a finished job costs a page of the table.
// Nor does the disk: the table's keys are laid out so that what a flush adds comes after all
// its index held (a job's id, which grows with time, or when it finished, ends every key), and
// the log writes those keys as tables of their own that go into the bottom level of its store
// untouched, where compactions never rewrite them (eventlog's doc, "Tables").
// A query merges memory's keys with the table's, memory winning for any job it holds or that
// changed since the last flush (table.go has the key layout and the invariants). An event on a
// stored job (an expiry, a re-drive) brings it back into memory first.
//
// Time enters only as the record's time or as a `now` argument to a query: a scheduled job whose
// run_at has passed reads as queued without any event, and idempotency keys expire by record
// time. A finished job leaves the Set only by its job.expired, which leaves a tombstone (its id
// and tenant, table.go) so that it reads as expired, not unknown, for good; the retention keys
// order the finished jobs by when a Retention (the server's policy, not in the log) makes them
// due.
// The package imports eventlog only.
package projections
