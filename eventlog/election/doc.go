// Package election decides which server writes a replicated event log (docs/design.md §10), and
// when a leader stops: the decisions alone, without a clock, a network or a bucket, so that the
// server (cmd/tether, on the wall clock and a JetStream KV bucket) and the simulator (on its
// virtual clock and its model of the bucket) run the same rules.
//
// The election only decides who tries to lead. Safety is the log's fence (eventlog, "One
// writer"): a server that wrongly believes it leads has every append refused. So the rules here
// are about liveness, and they lean one way: a healthy leader is never given up. A leader keeps
// its lead through a lost answer, through a bucket that does not answer, and through JetStream
// electing leaders of its own (a NATS node lost), for as long as its NATS server answers it. It
// stops only when another server holds the key, when its NATS server has not answered for a
// whole TTL (it is cut off, and a standby takes over), or when JetStream has answered nothing
// for Patience. A standby takes the key only when it is free, and, if it knows who led last,
// only once that leader does not say it still leads.
//
// The key holds a Holder's value, which names the server and the moment it took the lead, so a
// leader that reads the key back tells its own renewal (whose answer was lost) from another
// server's claim.
//
// What a server says of the lead (its /readyz, which standbys and clients ask) is stricter
// after a pause: a leader that was paused (a gap of more than half a TTL in its own ticks and
// answers, seen even before its first tick after the pause runs) may have lost the key to a
// server that took over meanwhile, and does not say it leads until the bucket, asked since,
// says the key is its own (Holder.Healthy); if the key expired meanwhile, it stops
// (ReasonLapsed) rather than take it back, since a server that took over may have let its own
// key lapse too and would go on leading beside it. An answer that comes out of a pause
// answered a request sent before it, and proves nothing. A leader that was not paused keeps saying it
// leads through a bucket that does not answer, as it keeps leading. A standby names the leader
// the key held when it last read it, none if the key was absent (Candidate.Leader), and only
// if it read the key since its last pause: a paused standby that goes on names no one until it
// has read the key again.
//
// # The driver
//
// Driver is the loop around those decisions, one server's part from standby to leader to
// deposed, with the clock, the bucket and what the server does (ask the last leader, take
// over, stop) handed in: the server runs it on the wall clock and a JetStream KV bucket, the
// simulator on its virtual clock and its model of the bucket, its losses and its delays. Its
// contract:
//
//  1. A standby looks at the key at once and every Every; a round still in flight lets the
//     next tick pass. It asks the last leader (Config.Check) before it takes a key that expired.
//  2. Once it created the key, its renewals start, and only then does the server take over
//     (Config.Won): a slow hand-over does not lose the lead just won.
//  3. A leader renews every TTL/4 and acts on every outcome only through Holder: a lost answer,
//     or a bucket that does not answer while the stream does, never stops it by itself.
//  4. Config.Deposed is called at most once, when the Holder stops; after it, and after Close,
//     the Driver asks nothing more and calls nothing more.
//  5. Every callback is called without the Driver's lock held; Bucket.Do and Clock.AfterFunc
//     must not call back before they return. The Driver never reads the wall clock.
package election
