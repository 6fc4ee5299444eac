package eventlog

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemUpstream is an Upstream in memory: what a test or the simulator gives several logs to
// share, as servers share a JetStream stream. It keeps every message, refuses a publish whose
// prev is not its last message (ErrFenced), and makes a message durable at once.
type MemUpstream struct {
	mu       sync.Mutex
	messages [][]byte
	grew     chan struct{} // closed and replaced when a message is added
	// Hold, if set, runs before each publish's wait returns: a test holds the durability of a
	// message there, as it would hold a WAL's fsync.
	Hold func()
}

// NewMemUpstream returns an empty upstream.
func NewMemUpstream() *MemUpstream { return &MemUpstream{grew: make(chan struct{})} }

// memUpstreamMaxPayload is the largest message a MemUpstream takes, JetStream's default.
const memUpstreamMaxPayload = 1 << 20

// Publish implements Upstream.
func (u *MemUpstream) Publish(prev uint64, payload []byte) func() (uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	hold := u.Hold
	var seq uint64
	var err error
	switch last := uint64(len(u.messages)); {
	case len(payload) > memUpstreamMaxPayload:
		err = fmt.Errorf("a message of %d bytes, over %d", len(payload), memUpstreamMaxPayload)
	case prev != last:
		err = fmt.Errorf("%w: expected last message %d, the upstream's is %d", ErrFenced, prev, last)
	default:
		u.messages = append(u.messages, append([]byte(nil), payload...))
		seq = last + 1
		close(u.grew)
		u.grew = make(chan struct{})
	}
	return func() (uint64, error) {
		if hold != nil {
			hold()
		}
		return seq, err
	}
}

// Last implements Upstream.
func (u *MemUpstream) Last(context.Context) (uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return uint64(len(u.messages)), nil
}

// Get implements Upstream.
func (u *MemUpstream) Get(_ context.Context, seq uint64) ([]byte, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if seq == 0 || seq > uint64(len(u.messages)) {
		return nil, fmt.Errorf("%w: message %d", ErrNotFound, seq)
	}
	return u.messages[seq-1], nil
}

// Read implements Upstream.
func (u *MemUpstream) Read(ctx context.Context, from uint64, visit func(uint64, []byte) error) error {
	for seq := max(from, 1); ; seq++ {
		u.mu.Lock()
		for seq > uint64(len(u.messages)) {
			grew := u.grew
			u.mu.Unlock()
			select {
			case <-grew:
			case <-ctx.Done():
				return ctx.Err()
			}
			u.mu.Lock()
		}
		payload := u.messages[seq-1]
		u.mu.Unlock()
		if err := visit(seq, payload); err != nil {
			return err
		}
	}
}

// MaxPayload implements Upstream.
func (u *MemUpstream) MaxPayload() int { return memUpstreamMaxPayload }

// Patience implements Upstream. A MemUpstream answers at once; a test that holds a publish
// (Hold) is not cut short.
func (u *MemUpstream) Patience() time.Duration { return time.Minute }
