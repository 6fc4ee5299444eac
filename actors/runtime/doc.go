// Package runtime runs tether's behaviours as supervised protoactor actors over the event log,
// and offers the Broker facade that transport calls.
//
// The actors: one dispatcher, one tenant actor per tenant, one job actor per leased job, one
// session actor per connected worker. Each kind runs under its own OneForOne supervisor (a
// protoactor guardian): a behaviour that panics is logged with its stack and restarted alone.
//
// The rules, in the order things happen:
//
//  1. A behaviour's Persist encodes its events and hands them to the log without waiting
//     (eventlog.AppendAsync); the behaviour goes on with its next message.
//  2. When an append is durable, the log's completion callback applies its events to the
//     projections, in log order, and only then delivers Persisted to the actor. So an actor
//     that learns its events are durable can read them back, and so can anyone it tells.
//  3. Nothing leaves a behaviour that depends on an event before that event is durable: replies,
//     assignments and notices to other actors are sent from the Persisted handler.
//  4. A restarted actor first waits until every persist issued before its restart is applied,
//     then rebuilds from the projections (Behaviour.Recover); Persisted and timers meant for the
//     failed incarnation are dropped.
//  5. Start-up: open the log, load the newest checkpoint, replay the tail, end the sessions the
//     last run left open, start an actor for every leased job (which logs a fresh lease_ttl of
//     grace), wait until all of that is durable, and only then return from Open. A checkpoint
//     is written every CheckpointEvery events and on Close, so the tail stays short.
//  6. A failed append fails the log; callers get the error and the server stops (Failed).
package runtime
