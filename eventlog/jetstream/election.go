package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Leader is what the election's key holds: who leads the stream, and where clients reach it.
type Leader struct {
	Node  string    `json:"node"`
	URL   string    `json:"url,omitempty"`
	Since time.Time `json:"since"`
}

// Election is one server's part in choosing the stream's writer.
type Election struct {
	kv  jetstream.KeyValue
	ttl time.Duration

	mu  sync.Mutex // Renew and Resign may race as a server stops
	me  Leader
	rev uint64 // the revision this server last wrote while it leads; 0 otherwise
}

// ErrLeadLost says a renewal was refused: the key expired, and maybe another server holds it.
var ErrLeadLost = errors.New("the lead was lost")

// leaderKey is the key of the election's bucket that the leader holds.
const leaderKey = "leader"

// Elect joins the stream's election as me. ttl is how long the leader's key lives unless it is
// renewed: the time a standby waits, at most, after the leader is gone.
func (s *Stream) Elect(ctx context.Context, me Leader, ttl time.Duration) (*Election, error) {
	bucket := "tether_leader_" + s.name
	var kv jetstream.KeyValue
	err := retry(ctx, func(ctx context.Context) (err error) {
		kv, err = s.js.KeyValue(ctx, bucket)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = s.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: bucket, Description: "which tether server writes the stream " + s.name,
			TTL: ttl, History: 1, Storage: jetstream.FileStorage, Replicas: s.Replicas(),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("the election's bucket %s: %w", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("the election's bucket %s: %w", bucket, err)
	}
	return &Election{kv: kv, me: me, ttl: st.TTL()}, nil
}

// TTL is the leader key's time to live, as the bucket has it.
func (e *Election) TTL() time.Duration { return e.ttl }

// TryLead takes the key if no one holds it, and reports whether this server now leads.
func (e *Election) TryLead(ctx context.Context) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	me := e.me
	me.Since = time.Now().UTC()
	v, _ := json.Marshal(me)
	rev, err := e.kv.Create(ctx, leaderKey, v)
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	case err != nil:
		return false, err
	}
	e.me, e.rev = me, rev
	return true, nil
}

// Renew writes the key again at the revision this server last wrote, so it lives another TTL.
// It fails if the key expired or someone else took it: this server no longer leads.
func (e *Election) Renew(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rev == 0 {
		return fmt.Errorf("%w: resigned", ErrLeadLost)
	}
	v, _ := json.Marshal(e.me)
	rev, err := e.kv.Update(ctx, leaderKey, v, e.rev)
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: %v", ErrLeadLost, err)
	}
	if err != nil {
		return fmt.Errorf("renew the lead: %w", err)
	}
	e.rev = rev
	return nil
}

// Resign deletes the key if this server still holds it, so a standby need not wait for it to
// expire.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rev == 0 {
		return nil
	}
	err := e.kv.Delete(ctx, leaderKey, jetstream.LastRevision(e.rev))
	e.rev = 0
	return err
}

// Leader returns who leads, if anyone does.
func (e *Election) Leader(ctx context.Context) (Leader, bool, error) {
	entry, err := e.kv.Get(ctx, leaderKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return Leader{}, false, nil
	case err != nil:
		return Leader{}, false, err
	}
	var l Leader
	if err := json.Unmarshal(entry.Value(), &l); err != nil {
		return Leader{}, false, fmt.Errorf("the election's key holds %q: %w", entry.Value(), err)
	}
	return l, true, nil
}
