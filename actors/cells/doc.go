// Package cells is the one runtime of tether's behaviours: it owns the ordering rules that make
// pipelined decisions durable, and every shell (the protoactor host in actors/broker, the
// deterministic world of actors/actorstest, the simulator) drives it. So the simulator, with
// every seed, runs the same ordering code as production.
//
// A cell is one actor: a Ref, a behaviour and its incarnation. The Runtime binds Refs to cells
// (making tenant and job cells on first use), hands each message to the Scheduler, and handles
// a delivery when the scheduler says the cell's turn has come (Handle). What it owns, in the
// order things happen:
//
//  1. Persist hands a behaviour's events to the Committer and returns at once; the behaviour
//     goes on with its next message. Persists complete in the order they were made.
//  2. When the committer reports them durable, the runtime applies them to the projections, in
//     log order, and only then schedules Persisted to the cell that made them: an actor that
//     hears its events are durable can read them back, and so can anyone it tells. A relay
//     (Cell.Relay) sends its message instead, as from the cell, at the same point and under
//     the same rule; a failed commit sends nothing. The committer reports a group commit at a
//     time (Flush): the runtime applies the whole group under one hold of the lock, then
//     tells each cell what the group holds for it in one delivery, in commit order, so that
//     an fsync wakes each actor once, however many of its persists it made durable. What a
//     cell sends on the turn of such a delivery goes at the end of the turn, one delivery per
//     cell it goes to, in the order sent.
//  3. A Persisted or a timer meant for an earlier incarnation of a cell is dropped: the
//     restarted behaviour rebuilt its state from projections that hold those events. A restart
//     (Restart) first waits until every persist issued before it is applied.
//  4. A behaviour recovers (Behaviour.Recover) before its first message.
//  5. Timers run on the injected Clock and die with their incarnation; a cancelled timer never
//     fires.
//  6. Stop unbinds a Ref at once, so the next message to it makes a new cell, and stops the old
//     cell after the messages already scheduled to it (a cell that stops itself does so with
//     no stop delivery: it still runs what reached it before). A message to a session that is
//     gone bounces (actors.Bounce).
//  7. A failed commit delivers Persisted with Err set; the server is stopping.
//
// The extension points are the Scheduler (protoactor's mailboxes and goroutines, or the
// simulator's seeded interleaving, or a test's FIFO), the Committer (the event log's group
// commit, or the simulator's, which injects crashes and disk faults there) and the Clock (the
// wall clock, or a virtual Timeline).
//
// The runtime also watches its own clock for stalls (stall.go): given Config.Monotonic, its
// driver ticks it every TickEvery, and a gap of StallMin or more is a stall, whose end
// actors.Env.Resumed tells the behaviours (a lease must not run out because the server could
// not read its heartbeats).
//
// Behaviours may state invariants of their state (actors.Checker); with Config.CheckInvariants
// the runtime checks them after every message, as the simulator and the tests do.
//
// Checkpoints are the runtime's too, so the simulator runs the same code: BeginCheckpoint,
// between two commits, copies the live projections and picks up the finished jobs that changed
// (projections.Flush); Checkpoint.Save writes the checkpoint and the finished jobs' table in one
// batch wherever the driver likes (the broker: on a goroutine of its own while commits go on),
// then lets the projections drop what the table holds, a part at a time under the write lock.
//
// Reads take the projections' read lock (Read), which every commit's fold waits for. A read of
// the table on disk (a client's list, a finished job) takes it only for memory and reads the
// disk without it (ReadOutside, projections.ListOutside), while a table lock keeps a checkpoint
// from ending (memory dropping the jobs it wrote) under it: a slow disk or a list that skips
// most of the history holds up a checkpoint's end, never an acknowledgement.
package cells
