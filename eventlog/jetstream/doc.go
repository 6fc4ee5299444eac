// Package jetstream puts tether's event log on a replicated NATS JetStream stream, for when one
// machine is not enough (DESIGN §10). It is an eventlog.Upstream, and the leader election that
// picks the stream's one writer.
//
// # The stream
//
// One stream per tether cluster, on the subject tether.log.<STREAM>. A message is one group
// commit: the encoded records of a batch, hashes included, exactly as the local copy stores
// them (eventlog/upstream.go); a new leader's first message is a fence that holds no record.
// The stream is created, if missing, as a file-store stream with the replicas asked for (3 in
// production), limits retention without limits (no message may age out: a new standby copies
// the stream from its first message), deletes and purges denied, and direct gets allowed.
//
// The NATS servers must run with `jetstream { sync_interval: always }`. With the default, a
// server acknowledges a message before it is fsynced, and Jepsen showed such messages lost
// when several servers lose power at once. A client cannot see that setting, so Connect cannot
// check it: the README says it.
//
// # One writer, fenced by the engine
//
// Every publish carries Nats-Expected-Last-Sequence, the last message its writer knows of. A
// leader that was deposed and goes on appending expects a message that is no longer the last
// (the new leader's fence came after it), so JetStream refuses the append and its log fails:
// eventlog.ErrFenced. The fencing does not depend on clocks or on the election.
//
// # The election
//
// Which server tries to lead is decided in a KV bucket, tether_leader_<STREAM>, whose TTL is
// the leader's lease: the key "leader" is taken by Create (compare-and-set on "absent"), renewed
// by Update at the revision the leader last wrote, and left to expire, or deleted, when the
// leader goes. Its value says who leads and the URL clients reach it at, which standbys send
// clients to. The election only keeps servers from fencing each other in turn; safety is the
// stream's fencing above.
package jetstream
