// Package jetstream puts tether's event log on a replicated NATS JetStream stream, for when one
// machine is not enough (docs/design.md §10). It is an eventlog.Upstream, and the leader election
// that picks the stream's one writer.
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
// Every publish carries Nats-Expected-Last-Sequence: the number of the last message its writer
// knows the stream holds, its own previous message (the log keeps one message in flight; see
// eventlog's doc, "One writer"). The stream's leader refuses it unless that is the stream's
// last message, counting the publishes it has taken and not yet stored. A leader that was
// deposed names a message that is no longer the last (the new leader's fence came after it),
// so JetStream refuses its append, however late it arrives, and its log fails:
// eventlog.ErrFenced. The fencing does not depend on clocks or on the election.
// Nats-Expected-Last-Msg-Id is not used: on a replicated stream JetStream 2.15 checks it only
// as each replica applies a message, and a refusal there stops the stream.
//
// A publish whose connection breaks before its answer is answered at once as unknown, and the
// log reads the message back.
//
// # Answers that do not come
//
// A NATS server can be alive and silent: paused, frozen, black-holed, or a stream leader that
// stopped answering while its raft group has not yet elected another. No request waits for
// such a server longer than Config.RequestTimeout (the server's is the leader TTL): a
// publish's acknowledgement, a read of a message or of the stream's state, a consumer's
// creation, a connection's handshake; eventlog asks again (Upstream.Patience), and a catch-up
// whose next message does not come within it is read again. The connection pings its server
// every quarter of it and leaves, for another server of the URL, one that answered none of two
// pings, so that asking again goes elsewhere when the silent one is the connection's own, and a
// leader whose own NATS server went silent moves before it would stop as cut off.
//
// # The election
//
// Which server tries to lead is decided in a KV bucket, tether_leader_<STREAM>, whose TTL is
// the leader's lease; Election.Do carries out the decisions of package eventlog/election (the
// leader renews at a quarter of the TTL and reads a refused renewal back; a standby takes a
// free key, after asking the last leader's /readyz). The key's value says who leads, the URL
// clients reach it at, which standbys send clients to, and an id of the claim. The election
// only keeps servers from fencing each other in turn; safety is the stream's fencing above.
//
// # One cluster, one configuration
//
// The settings every server must share (auth mode, the admin and metrics tokens' digests, the
// leader TTL, retention, archiving, limits) are recorded in the stream's metadata by the
// server that creates it (Config.Settings); a server whose settings, or --nats-replicas, differ
// is refused, with every difference named. --cluster-reconfigure records a server's own.
package jetstream
