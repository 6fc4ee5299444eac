package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tetherhq/tether/eventlog/election"
)

// Leader is what the election's key holds: who leads the stream, and where clients reach it.
// ID is drawn afresh for every claim, so a leader that reads the key back knows its own.
type Leader struct {
	Node  string    `json:"node"`
	URL   string    `json:"url,omitempty"`
	Since time.Time `json:"since"`
	ID    string    `json:"id"`
}

// NewLeader is a claim for node, reached at url.
func NewLeader(node, url string) Leader {
	var id [8]byte
	_, _ = rand.Read(id[:])
	return Leader{Node: node, URL: url, Since: time.Now().UTC(), ID: hex.EncodeToString(id[:])}
}

// Value is the claim as the key holds it.
func (l Leader) Value() []byte {
	v, _ := json.Marshal(l)
	return v
}

// ParseLeader reads a claim from the key's value.
func ParseLeader(v []byte) (Leader, error) {
	var l Leader
	if err := json.Unmarshal(v, &l); err != nil {
		return Leader{}, fmt.Errorf("the election's key holds %q: %w", v, err)
	}
	return l, nil
}

// Election is one server's way to the stream's election bucket: it carries out the actions
// package election decides, and says how each ended.
type Election struct {
	s   *Stream
	kv  jetstream.KeyValue
	ttl time.Duration
	me  Leader
}

// leaderKey is the key of the election's bucket that the leader holds.
const leaderKey = "leader"

// Elect joins the stream's election as me. ttl is how long the leader's key lives unless it is
// renewed: the time a standby waits, at most, after the leader is gone. The bucket keeps the
// TTL it was made with (TTL).
func (s *Stream) Elect(ctx context.Context, me Leader, ttl time.Duration) (*Election, error) {
	bucket := "tether_leader_" + s.name
	var kv jetstream.KeyValue
	var st jetstream.KeyValueStatus
	lookup := func(ctx context.Context) (err error) {
		kv, err = s.js.KeyValue(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = s.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket: bucket, Description: "which tether server writes the stream " + s.name,
				TTL: ttl, History: 1, Storage: jetstream.FileStorage, Replicas: s.Replicas(),
			})
		}
		if err == nil {
			st, err = kv.Status(ctx)
		}
		return err
	}
	// Servers that start together on a new stream race to make the bucket: the one that
	// loses, or that looks while the bucket's replicas elect their leader, is told for a
	// moment that its stream is not there, or already is.
	err := s.retry(ctx, lookup)
	for tries := 0; justMade(err) && tries < 100 && ctx.Err() == nil; tries++ {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		err = s.retry(ctx, lookup)
	}
	if err != nil {
		return nil, fmt.Errorf("the election's bucket %s: %w", bucket, err)
	}
	return &Election{s: s, kv: kv, me: me, ttl: st.TTL()}, nil
}

// justMade reports whether err is what a bucket that another server is making at the same time
// answers: not there yet, or there already.
func justMade(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) ||
		errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamNotFound || api.ErrorCode == jetstream.JSErrCodeStreamNameInUse)
}

// TTL is the leader key's time to live, as the bucket has it.
func (e *Election) TTL() time.Duration { return e.ttl }

// Me is this server's claim.
func (e *Election) Me() Leader { return e.me }

// Do carries out one action against the bucket (or, for a Probe, the stream), waiting at most
// a quarter of the TTL for the answer, and says how it ended. Check, Lead and Stop are not the
// bucket's: the caller carries them out.
func (e *Election) Do(ctx context.Context, a election.Action) election.Outcome {
	ctx, cancel := context.WithTimeout(ctx, max(e.ttl/4, 100*time.Millisecond))
	defer cancel()
	switch a.Kind {
	case election.Renew:
		rev, err := e.kv.Update(ctx, leaderKey, e.me.Value(), a.Rev)
		var api *jetstream.APIError
		switch {
		case err == nil:
			return election.Outcome{Kind: election.Updated, Rev: rev}
		case errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
			return election.Outcome{Kind: election.Refused}
		}
	case election.Read:
		entry, err := e.kv.Get(ctx, leaderKey)
		switch {
		case err == nil:
			return election.Outcome{Kind: election.Found, Value: entry.Value(), Rev: entry.Revision()}
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return election.Outcome{Kind: election.Absent}
		}
	case election.Create:
		rev, err := e.kv.Create(ctx, leaderKey, e.me.Value())
		switch {
		case err == nil:
			return election.Outcome{Kind: election.Created, Rev: rev}
		case errors.Is(err, jetstream.ErrKeyExists):
			return election.Outcome{Kind: election.Exists}
		}
	case election.Probe:
		if err := e.s.nc.FlushWithContext(ctx); err != nil {
			break // the NATS server did not answer a ping
		}
		// What JetStream last took: a read, even of the stream's state, a leader that lost
		// its quorum goes on answering for a while (and now and then answers as if it had it).
		return election.Outcome{Kind: election.Answered, At: e.s.answered()}
	}
	return election.Outcome{Kind: election.Unanswered}
}

// Resign deletes the key if it is still this server's at rev, so a standby need not wait for it
// to expire.
func (e *Election) Resign(ctx context.Context, rev uint64) error {
	return e.kv.Delete(ctx, leaderKey, jetstream.LastRevision(rev))
}
