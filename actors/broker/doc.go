// Package broker runs tether's behaviours in production and offers the Broker facade that
// transport calls.
//
// The ordering rules (persist, then apply to the projections, then deliver Persisted; drop what
// was meant for an earlier incarnation; timers; stop) are not here: they are the cell runtime's
// (actors/cells), which the simulator and actorstest drive too. This package plugs into it:
//
//   - protoactor is the scheduler: one actor per cell, its mailbox on a pool of warm goroutines
//     (pool.go), under a OneForOne supervisor per kind of actor (a protoactor guardian). A
//     behaviour that panics is logged with its stack and restarted alone; the runtime waits
//     until what it persisted is applied, then it rebuilds from the projections.
//   - the event log's group commit is the committer: it calls back in seq order on its own
//     goroutine, where the runtime folds the projections and schedules the replies, so there is
//     no hand-off between an fsync and the replies that wait for it.
//   - the wall clock is the clock; each cell draws from its own PCG stream.
//
// The actors: one dispatcher, one tenant actor per tenant, one job actor per leased job, one
// session actor per connected worker. A job or session actor whose cell stopped is parked and
// runs the next cell of its kind (host.go): one actor per job in flight and per connected
// worker still, without a spawn and a stop per job or per connection. Every delivery names its cell, so one late for the last job is dropped.
//
// Start-up (Open): open the log, load the newest checkpoint, replay the tail, end the sessions
// the last run left open, start the dispatcher and an actor for every leased job (which logs a
// fresh lease_ttl of grace) and every tenant with reservations, wait until all of that is
// durable, and only then return. A checkpoint (cells.Checkpoint) is written in the background
// every CheckpointEvery events (and at least four per live job) and on Close, so the tail stays
// short; it moves the jobs finished since the last one to the table on disk, so memory holds
// what is live. A failed append fails the log; callers get the error and the server stops (Failed).
//
// Beside the actors, two goroutines look after the archive: the archiver (archive.go) seals old
// records into segments and deletes those past ArchiveConfig.Keep, and the scrub (scrub.go)
// reads every segment whole against its checksum, paced, at start and every ScrubEvery, and
// logs a damaged one once (ARCHIVE_DAMAGED). Neither runs before Open returns, nor on the
// commit path.
//
// On a replicated log (docs/design.md §10) a server stands by before it leads (Lead): a Standby
// folds the upstream into its copy while package election's Driver campaigns; once the Driver won
// the key, its renewals already running, the Standby takes over in place (catch up, fence, start
// the actors). An append the upstream refuses (eventlog.ErrFenced) deposes the Driver.
//
// The facade gives transport what it needs and no more: commands that return once their events
// are durable, reads of the projections (Read, Get, List), a job's stream for SSE (JobStream),
// the records that make up a flow's stream (FlowEvents: which events those are is decided here,
// so transport only numbers and renders them) and the log's figures for metrics (LogStats,
// LogBytes). It does not hand out the log.
package broker
