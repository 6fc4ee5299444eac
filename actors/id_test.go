package actors

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// idEnv is an Env with a clock and randomness, all NewID and NextID use.
type idEnv struct {
	Env
	now time.Time
	r   *rand.Rand
}

func (e idEnv) Now() time.Time   { return e.now }
func (e idEnv) Rand() *rand.Rand { return e.r }

// NextID is NewID's ULID from the same draws, or the one right after the last if that does not
// sort after it, and costs the string it returns and nothing else.
func TestNextIDIsNewIDsOrTheNext(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	env := func() idEnv { return idEnv{now: at, r: rand.New(rand.NewPCG(1, 2))} }
	var last ulid.ULID
	if got, want := NextID(env(), &last), NewID(env()); got != want {
		t.Fatalf("NextID = %s; NewID from the same draws = %s", got, want)
	}
	before := last
	next := NextID(env(), &last) // the same draws again: not after last, so last + 1
	if id := ulid.MustParse(next); id.Compare(before) <= 0 || id.Time() != before.Time() {
		t.Fatalf("NextID = %s after %s; want the next ULID", next, before)
	}
	e := env()
	var asEnv Env = &e // boxed once, as a cell is
	if n := testing.AllocsPerRun(100, func() { _ = NextID(asEnv, &last) }); n != 1 {
		t.Fatalf("NextID makes %v allocations; want 1, its string", n)
	}
}
