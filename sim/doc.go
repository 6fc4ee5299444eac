// Package sim is tether's deterministic simulator (DESIGN §7): one goroutine, a virtual clock, a
// seeded PRNG and a queue of deliveries, running the production behaviours, projections and the
// real log on Pebble's crashable in-memory filesystem under injected faults.
//
// It imports actors, eventlog and projections, never transport's sockets or protoactor. It is
// built by the simulator issue.
package sim
