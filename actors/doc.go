// Package actors holds tether's decision code: the tenant, job, worker-session and dispatcher
// behaviours, which turn commands into events, and the runtime that runs them as supervised
// protoactor actors (DESIGN §2).
//
// Contract (to be filled in by the broker core issue): behaviours are pure. They get their
// state, one message and an environment that supplies time, IDs, randomness, persistence, sends
// and timers; they never import protoactor, read the wall clock, use global randomness or touch
// the network. Only the runtime adapter imports protoactor. The package imports eventlog and
// projections only.
package actors
