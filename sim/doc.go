// Package sim is tether's deterministic simulator (docs/design.md §7): `tether sim`.
//
// A run is one goroutine, a virtual clock, seeded random streams (workload, network, the
// scheduler, the server's Env, and one per fault class, so that turning a class off does not
// move the others) and a priority queue of timed items. Into that world it puts:
//
//   - the server: the production behaviours (package actors) on the production cell runtime
//     (actors/cells), which carries the ordering rules (persist, then apply, then deliver;
//     incarnations; timers; stop and bounce) for the simulator as for protoactor. The simulator
//     plugs in its scheduler (per-cell FIFO mailboxes, one message at a time in an order the
//     scheduler stream picks), its committer (a group commit on the virtual clock, where crashes
//     and disk faults strike) and its clock. Under them: the production projections, and the
//     production event log on Pebble's crashable in-memory filesystem, with start-up through the
//     same functions as the broker (projections.Rebuild, actors.StaleSessionEnds,
//     actors.ResumedRefs). The behaviours' invariants (actors.Checker) are checked after every
//     message;
//   - clients of two or three tenants that submit (with and without idempotency keys, in batches,
//     with reservations, some after a delay, some to run at a round time, as people schedule work,
//     so that several tenants' jobs come due at one instant), cancel (their jobs and other
//     tenants'), reserve, release, re-drive, list, set quotas, and pause and resume their queues
//     (heal resumes them all; a lease decided after a pause, before its resume, breaks "pause");
//     they also submit flows of 2..5 steps with random needs, some tolerating failure, and cancel
//     some (flows.go: a step started before each step it needs succeeded breaks "flow_order", a
//     flow that ends twice or not as its steps say "flow_end", and after heal every flow must
//     end); and they create schedules that tick every few seconds or minutes, and pause, resume
//     and delete them (schedules.go: a tick decided twice, out of order, before its time or while
//     paused breaks "schedule_ticks", a fire against overlap or catch_up "schedule_policy", and
//     after heal every schedule still active must decide a tick);
//   - workers, some with Ed25519 keys, that speak the worker protocol: every frame goes through
//     the JSON encoding of wire.Frame, and the server side turns frames into commands with
//     transport/protocol, as the WebSocket and long-poll handlers do. A WebSocket worker grants
//     credit; a long-poll worker polls, and the server holds the poll with the very state
//     machine transport/poll.go drives (transport/longpoll; poll.go). Workers heartbeat each
//     lease as often as its assignment says, and keep and resend their results, by the Go
//     SDK's own rules (transport/client/policy); now and then one stops cleanly: it closes its
//     connection, grants no more credit, and gives back every job it holds or is handed. A
//     worker told of a cancel mostly fails the job with code cancelled, and sometimes
//     completes it with what it had, as a handler that returns when told to stop does; a job
//     whose cancel was asked for that ends succeeded breaks "cancel";
//
// Half the seeds (a stream of their own picks which) run the log on a replicated JetStream
// stream instead (docs/design.md §10), as processes of three nodes (stream.go, election.go). The
// stream takes a publish by the rule the real stream's leader applies (the message it names
// must be its last, counting the publishes it took and has not stored), stores it a raft round
// later, and checks that every message it stores continues the chain (invariant
// "stream_chain"); the oracle folds what it stores. Each process's log is the production log,
// on the node's crashable in-memory disk, talking to the stream through a link the simulator
// serves: the log's goroutines run until they wait on the simulator (link.pump, with
// eventlog.Log.Pipeline), so the run stays deterministic. The election is the server's own
// driver (election.Driver: campaign, take over, renew, ask the last leader, depose) on the
// virtual clock, against a model of the KV bucket whose key expires a TTL after it was written;
// a leader that gives up the lead when the bucket did not say another server holds it, or as
// cut off when NATS answered it within the TTL, breaks "lead_kept"; one that was paused while
// another took over, and says it leads (its /readyz: election.Driver.Healthy, checked after
// every step) while that one does, breaks "ready_alone". Leader faults (FaultLeader): the
// leader paused for up to three TTLs and going on with everything it had in flight, including
// publishes its client had not flushed yet; the leader cut off from NATS, its requests held and
// delivered late when the cut heals; the stream or the bucket answering nothing while it elects
// a raft leader; lost requests and answers, the renewals' among them. A standby that wins the
// key starts a process on its node, whose copy opens as a follower and is promoted in place
// (eventlog.Log.Lead, as the server's standby is), catching up and fencing the stream, while
// the process before it may still run, not knowing, until its appends are refused or its
// renewal reads another's claim. Crashes on a replicated log lose the node's unsynced copy, never
// the stream.
//
// Faults, with rates drawn per seed (swarm testing): lost, delayed, reordered and duplicated
// messages; partitions; worker crashes, pauses past the lease, reconnects over the other
// transport; misbehaving workers (a lease that ended, another lease's nonce, a bad signature,
// another tenant's job, sent before each send of the honest report); server crashes at any step,
// mid-commit with the records written and not synced (a share of the WAL's unsynced blocks
// survives), after a commit before its replies, and during recovery; WAL write and sync errors
// through errorfs; clock jumps both ways; stalls of the server process (FaultStall, stall.go:
// stopped for a moment to minutes, mostly about a lease_ttl; what reaches it meanwhile waits
// unread, and when it goes on its overdue timers fire in any order, all before the reads half the
// time). The server's stall watch (actors/cells) ticks on the true clock, on the process's behalf,
// so a stall stops it.
//
// Planted bugs (make sim-mutants) prove the invariants bite, in the behaviours (actors/mutant*.go),
// in the cell runtime (actors/cells/mutant*.go), in the log on an upstream (eventlog/mutant*.go)
// and in the election (eventlog/election/mutant*.go).
//
// A run has three phases: safety (Config.Steps steps with faults), heal (faults off, server up,
// workers back), and liveness (every job terminal and every reservation ended within
// LivenessBound). Some invariants hold only where no fault interferes, and are checked then:
// in a run no fault has touched (--off all), no attempt is spent on a lease whose assignment
// never reached its worker, and no lease expires under its worker; in the liveness phase, no
// lease expires under a worker alive and connected since before the lease's last lease_ttl.
// Under every fault: no lease runs out while a heartbeat of its worker naming it, sent within
// lease_ttl, had waited cells.StallMin or more to be read ("stall"); a lease made before a
// restart is put back as unacknowledged only if its worker does not hold it, and none that
// never reached its worker spends an attempt once the worker was heard from by the process
// that inherited it ("unacknowledged"). The invariants are checked as things happen: on every
// durable record by an oracle, a fold of the log written apart from the projections
// (oracle.go); on every answer as it leaves the server (net.go, worker.go); after every
// recovery and every 50 commits against a full replay; and at the end.
//
// Determinism is the contract: the same Config gives the same trace hash (a SHA-256 of every
// step), in any process. Nothing here ranges over a map without sorting, and the only
// goroutines are Pebble's, which the simulator waits for at every commit, and, on a replicated
// log, the log's pipeline, which it runs until it waits on the simulator. Pebble's own
// CrashClone draws its random numbers while ranging over maps, so crashClone builds the same
// cut reproducibly from its synced and full states.
//
// sim imports actors, eventlog and projections, and of transport only the socket-free wire
// types and protocol translation; never protoactor.
package sim
