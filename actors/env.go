package actors

import (
	"encoding/binary"
	"math/rand/v2"
	"time"

	"github.com/oklog/ulid/v2"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Behaviour is the decision code of one actor. The runtime (protoactor in production, the
// simulator's loop in tests) calls Recover once before the first message and again after a
// restart, then Receive for each message, one at a time.
type Behaviour interface {
	// Recover rebuilds the behaviour's state from the committed projections. The runtime calls
	// it only once every event the behaviour persisted before is durable and applied.
	Recover(env Env)
	// Receive handles one message.
	Receive(env Env, msg any)
}

// Checker is a behaviour that states invariants of its state (the `// INVARIANT:` comments in
// its code). A runtime that checks them (the simulator, the tests) calls CheckInvariants after
// every message the behaviour handles.
type Checker interface {
	CheckInvariants() error
}

// Env is everything a behaviour may use of the world. Time, randomness and IDs come from it so
// that the simulator can drive the same code with a virtual clock and a seeded PRNG.
type Env interface {
	Now() time.Time
	// Resumed is when the server last came back from a stall: a span in which it ran nothing
	// (a SIGSTOP, a frozen VM, a long pause), so read nothing its workers sent, though they
	// may have kept sending; zero if it has not stalled since it started. Time the server could
	// not listen is no worker's fault.
	Resumed() time.Time
	Rand() *rand.Rand
	// Persist hands events to the log and returns at once; the slice is the log's from then
	// on, and the behaviour must not change it. When they are durable (and applied
	// to the projections) the runtime delivers a *Persisted{Then: then} to this actor (a
	// pointer into the memory the persist already has, so the notice is not boxed anew); if the log
	// failed, Persisted.Err is set and the server is stopping. Persists of one actor complete in
	// the order they were made.
	Persist(events []eventlog.Payload, then any)
	// Relay is Persist for a decision whose one consequence, once it is durable, is a message:
	// when the events are durable and applied, the runtime sends msg to `to` as from this
	// actor, with no Persisted and no turn of the actor in between (the job's lease and its
	// assignment: one delivery less per job). If the log failed, nothing is sent. Relays
	// complete in order with the actor's persists.
	Relay(events []eventlog.Payload, to Ref, msg any)
	// DropRelays keeps the messages of this actor's relays made so far from being sent, if
	// they have not been: a decision since made them wrong (a lease that ended before it was
	// durable). Their events are committed all the same.
	DropRelays()
	// Send delivers msg to an actor, spawning a job actor on first use of its Ref.
	Send(to Ref, msg any)
	// Forward delivers msg as if sender had sent it, so the receiver's replies reach sender.
	Forward(to Ref, msg any, sender Ref)
	// Sender is who sent the message being handled (the zero Ref for timers and Persisted).
	Sender() Ref
	// After delivers msg to this actor once d has passed on the Env's clock.
	After(d time.Duration, msg any) TimerID
	Cancel(id TimerID)
	// Stop stops an actor once it has handled every message sent to it before.
	Stop(ref Ref)
	// Read runs fn with the committed projections. fn must not keep or modify what it reads.
	Read(fn func(*projections.Set))
	// ReadBy is Read of a Reader the behaviour already is or has, where the func Read takes
	// would be an allocation of its own each time it is made.
	ReadBy(r Reader)
	Log() *zap.Logger
}

// Reader reads the projections for Env.ReadBy, under their read lock; it must not keep or
// modify what it reads.
type Reader interface {
	ReadProjections(*projections.Set)
}

// Persisted is delivered (by pointer) to an actor when the events of one of its Persist calls
// are durable.
type Persisted struct {
	Then    any
	Receipt eventlog.Receipt
	Err     error
}

// TimerID names a pending After.
type TimerID uint64

// RefKind says what kind of actor a Ref names.
type RefKind uint8

// The kinds of actors.
const (
	RefNone RefKind = iota
	RefDispatcher
	RefTenant
	RefJob
	RefSession
	// RefExternal is anything outside the behaviours (a caller waiting for a reply, a worker
	// connection); the runtime gives it meaning through Ref.External.
	RefExternal
)

// Ref names an actor or an external party. It is comparable and safe to keep in state.
type Ref struct {
	Kind RefKind
	ID   string
	// External is the runtime's handle for a RefExternal.
	External any
}

// DispatcherRef names the one dispatcher.
func DispatcherRef() Ref { return Ref{Kind: RefDispatcher} }

// TenantRef names a tenant's intake actor.
func TenantRef(name string) Ref { return Ref{Kind: RefTenant, ID: name} }

// JobRef names the actor of an in-flight job.
func JobRef(id string) Ref { return Ref{Kind: RefJob, ID: id} }

// SessionRef names the actor of a worker's connection.
func SessionRef(id string) Ref { return Ref{Kind: RefSession, ID: id} }

// IsZero reports whether r names no one.
func (r Ref) IsZero() bool { return r.Kind == RefNone }

// NewID returns a ULID made from the Env's clock and randomness, so the simulator's IDs repeat
// with its seed.
func NewID(env Env) string {
	id := newULID(env)
	return id.String()
}

func newULID(env Env) ulid.ULID {
	var entropy [16]byte
	r := env.Rand()
	binary.BigEndian.PutUint64(entropy[:8], r.Uint64())
	binary.BigEndian.PutUint64(entropy[8:], r.Uint64())
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(env.Now()))
	_ = id.SetEntropy(entropy[:10])
	return id
}

// NextID returns NewID's ULID unless it does not sort after *last (made in the same
// millisecond, or after the clock went back), and then the one right after *last; it sets *last.
// So the IDs one issuer makes sort in the order it made them: a tenant's jobs, which lists page
// through by id, newest first by id.
func NextID(env Env, last *ulid.ULID) string {
	id := newULID(env) // not NewID's string, which was made only to be parsed again
	if id.Compare(*last) <= 0 {
		id = *last
		for i := len(id) - 1; i >= 0; i-- { // id + 1, as a 128-bit big-endian number
			if id[i]++; id[i] != 0 {
				break
			}
		}
	}
	*last = id
	return id.String()
}

// Receipt proves an acknowledged change: the seq and chain hash of the last event it caused.
type Receipt struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

func receiptOf(r eventlog.Receipt) Receipt { return Receipt{Seq: r.Last, Hash: r.Hash.String()} }
