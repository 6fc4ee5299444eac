// Package actors holds tether's decision code: the tenant, dispatcher, job and worker-session
// behaviours, which turn commands into events (docs/design.md §2, §4).
//
// A behaviour is pure. It gets its state, one message and an Env that supplies the time,
// randomness, IDs, persistence, sends and timers; it never imports protoactor, reads the wall
// clock, uses global randomness or touches the network (TestBehavioursArePure checks). They run
// on one runtime, actors/cells, which carries the ordering rules below that are not the
// behaviours' own (persist, apply, deliver; incarnations; timers; stop); protoactor drives it in
// production (actors/broker), a FIFO in tests (actors/actorstest), and the simulator's seeded
// scheduler under faults. The dispatcher, job and tenant state their invariants
// (invariants.go, `// INVARIANT:`), which the tests and the simulator check after every message.
//
// Every Receive has one shape: a type switch over the messages the behaviour takes, each case
// one call to the method that handles that message, and nothing returned early. A condition on
// the behaviour's state that decides whether a message is taken at all guards the call the
// same way in every case (the job's `if a.onLease(env, msg) { a.progress(env, m) }`), as does
// what follows every message (the dispatcher's `if d.handle(env, msg) { d.dispatch(env) }`,
// where each of handle's cases ends by saying whether it may have made a lease possible). So
// one read of a Receive shows which messages a behaviour takes and where each goes.
//
// Who owns what:
//
//   - Tenant (one per tenant), in four parts, each with its own state, reset, messages and
//     invariants. Intake: validation and limits, idempotency keys, max_active (committed
//     non-terminal jobs + its own admitted-but-not-durable jobs + reservations), reservations,
//     and the quota check of a re-drive. Credentials: worker registration (spending
//     enroll-token uses), renewal and revocation, API keys and enroll tokens. Flows and
//     schedules: their decisions, whose jobs it submits as its own (flow.go, schedule.go).
//   - Dispatcher (one): every job that is not leased — the queued and scheduled jobs in
//     priority heaps, cancel of a waiting job, re-drive of a dead one, and the end of a
//     finished one (job.expired: its retention ended, the dead-letter cap, a delete, a purge;
//     retention.go) — worker credit, and the pause of a queue (a paused queue's jobs wait
//     in their heap, and none is leased from the dispatcher's decision to pause until its
//     resume). It
//     matches ready jobs to sessions with credit (their tenant's jobs only, by priority then age,
//     concurrency keys taking turns, honouring run_at, max_running and each key's
//     max_running_per_key, which it decides and records: keys.go), picks the lease id, and
//     routes job commands to the
//     job's actor while a lease is held. (The runtime sends a worker's progress, completion and
//     failure to a job's actor straight when one is running; the actor hands what no lease of
//     its covers to the dispatcher.)
//   - Job (one per leased job): the lease — heartbeat extension, progress, completion (lease,
//     nonce, output hash, Ed25519 signature), failure with retry or dead-lettering, cancel
//     requests (once one is asked for, however the lease ends the job ends cancelled: a
//     completion that comes after it is taken as the worker's acknowledgement), expiry, release
//     on revocation, and the release of a job not tried (a worker's ReleaseLease, an
//     Undelivered assignment, a lease made before a restart that its worker, heard from since,
//     does not hold), which spends no attempt unless the job was released LeaseReleasesMax
//     times in a row. When the lease ends the job goes back to the
//     dispatcher, which stops the actor.
//   - Session (one per connection): delivers assignments and cancel notices to the worker,
//     answers heartbeats, and ends the session when they stop or the worker is revoked. It
//     knows whether anyone is there to take an assignment: a WebSocket session from open to
//     end, a long-poll session while a poll waits (Offer to Withdraw, and then until the
//     dispatcher has seen every lease that offer brought arrive). An assignment that finds no
//     one goes back (Undelivered).
//
// The ordering rules:
//
//  1. A behaviour decides, folds its events into its own state at once, and persists them; it
//     never waits for its own appends (pipelining, docs/design.md §2).
//  2. Nothing that depends on an event leaves the behaviour before the event is durable: replies,
//     assignments, notices to other actors are sent when Persisted arrives, or, for a decision
//     whose one consequence is a message (a lease and its assignment), relayed by the runtime
//     once the events are durable (Env.Relay). One exception, safe
//     because the log is a prefix: a job actor tells the dispatcher a lease is ending as soon as
//     it has handed the end to the log (leaseEnding), and the dispatcher leases the freed slot at
//     once. That lease is appended after the end, so no durable prefix holds both, and its
//     assignment leaves only once it, and so the end, is durable. A worker's next job then
//     waits for one fsync after its result, not two.
//  3. Committed state is read from the projections, which hold every durable event before the
//     Persisted of that event is delivered; so a notice about an event can always be checked
//     against the projections.
//  4. Notices carry the seq of the event they announce; a dispatcher rebuilt at seq S ignores
//     notices at or below S, which its rebuild already contains.
//  5. A restarted behaviour rebuilds from the projections (Recover) only once everything it
//     persisted before is durable. A job found leased gets a fresh lease_ttl of grace, logged,
//     because heartbeat extensions live only in memory. Its worker's first heartbeat since
//     (the dispatcher tells the job, disowned) says whether the worker holds it: one it does
//     not name, under which no worker wrote, never reached it, and goes back unspent
//     (eventlog.LeaseUnacknowledged). Workers name every lease they hold, results unacknowledged
//     included.
//  6. Every refusal is a *Rejection with a stable Code, each in the one table of codes
//     (wire.ErrorCodes), which gives its status; a test fails when one is missing there.
//  7. An assignment is offered to the worker only while someone is there to take it, and one
//     that does not reach the worker comes back, spending no attempt: the session hands back
//     what arrives while it offers nothing; a runtime hands back what it cannot deliver to a
//     session that is gone (Bounce); the transport hands back what it could not write.
//  8. Each assignment says how often its lease must be heartbeaten (HeartbeatIntervalFor: a
//     third of its lease_ttl, at most HeartbeatInterval), so a worker that heartbeats on time
//     never loses a lease the server accepted.
//  9. A stall of the server is no worker's fault. A server that ran nothing for a while (a
//     SIGSTOP, a frozen VM, a long pause) read nothing its workers sent meanwhile, and its
//     overdue timers may fire before those heartbeats are read. The runtime watches its own
//     clock (Env.Resumed, actors/cells' stall watch): a lease never runs out within lease_ttl of
//     the end of a stall (the job logs the grace, eventlog.ExtendedStallGrace), and a session's
//     missed heartbeats count from it.
package actors
