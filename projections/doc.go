// Package projections holds the views of the event log: queue, leases, quotas, job snapshots,
// workers, dead letters and counters.
//
// Contract (to be filled in by the broker core issue): a projection is a pure fold, Apply(record)
// in seq order, with no clock, I/O or goroutines; a checkpoint plus the tail after it equals a
// full replay, and live state equals a replay of the log. The package imports eventlog only.
package projections
