package cells_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/cells"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// driver is the smallest deterministic driver: one FIFO, commits that wait for sync, and an
// Agenda for a clock. The tests below script the ordering rules against it.
type driver struct {
	rt      *cells.Runtime
	now     time.Time
	agenda  cells.Agenda
	queue   []queued
	commits []commit
	seq     uint64
	out     []string // what reached external parties, and what the probes saw
	broken  []string
	handled int // deliveries run
	probes  map[string]*probe
}

type queued struct {
	c *cells.Cell
	d cells.Delivery
}

type commit struct {
	events []eventlog.Payload
	done   func(eventlog.Receipt, error)
}

func (d *driver) Start(*cells.Cell) {}
func (d *driver) Schedule(c *cells.Cell, del cells.Delivery) {
	d.queue = append(d.queue, queued{c, del})
}
func (d *driver) Commit(c *cells.Commit) {
	d.commits = append(d.commits, commit{c.Events, c.Done})
}
func (d *driver) Now() time.Time { return d.now }
func (d *driver) AfterFunc(after time.Duration, f func()) cells.Timer {
	return d.agenda.At(d.now.Add(after), "", f)
}

func newDriver() *driver {
	d := &driver{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), probes: map[string]*probe{}}
	d.rt = cells.New(cells.Config{
		Scheduler: d, Committer: d, Clock: d,
		Make: func(ref actors.Ref) actors.Behaviour {
			if ref.Kind == actors.RefTenant {
				p := &probe{d: d, name: ref.ID}
				d.probes[ref.ID] = p
				return p
			}
			return nil
		},
		External:        func(to actors.Ref, msg any) { d.out = append(d.out, fmt.Sprintf("%s<-%v", to.ID, msg)) },
		CheckInvariants: true,
		Broken:          func(ref actors.Ref, err error) { d.broken = append(d.broken, ref.ID+": "+err.Error()) },
	})
	return d
}

// run delivers until nothing is queued.
func (d *driver) run() {
	for len(d.queue) > 0 {
		q := d.queue[0]
		d.queue = d.queue[1:]
		d.rt.Handle(q.c, q.d)
		d.handled++
	}
}

// sync makes the pending commits durable, or fails them.
func (d *driver) sync(err error) {
	commits := d.commits
	d.commits = nil
	for _, c := range commits {
		if err != nil {
			c.done(eventlog.Receipt{}, err)
			continue
		}
		first := d.seq + 1
		d.seq += uint64(len(c.events))
		c.done(eventlog.Receipt{First: first, Last: d.seq, Time: d.now}, nil)
	}
	d.rt.Flush()
}

// advance moves the clock, firing what falls due.
func (d *driver) advance(by time.Duration) {
	end := d.now.Add(by)
	for it, ok := d.agenda.Next(); ok && !it.At.After(end); it, ok = d.agenda.Next() {
		d.agenda.Take()
		d.now = it.At
		it.Run()
	}
	d.now = end
}

// probe is a behaviour that does what it is told and says what it sees.
type probe struct {
	d        *driver
	name     string
	timer    actors.TimerID
	recovers int
	bad      bool
	notices  []*actors.Persisted // every one it was told, kept
}

type (
	setQuota struct{ n int } // persist a quota of n, then report what the projections hold
	arm      struct{ d time.Duration }
	cancel   struct{}
	stopSelf struct{}
	breakIt  struct{}
	ring     struct{}
	// relayQuota persists a quota of n and relays seeQuota to the probe named to.
	relayQuota struct {
		n  int
		to string
	}
	seeQuota struct{ of string }
	// tellAfter persists a quota of n and, once it is durable, tells the probe named to.
	tellAfter struct {
		n  int
		to string
	}
	dropRelays struct{}
)

func (p *probe) Recover(actors.Env) { p.recovers++ }

func (p *probe) Receive(env actors.Env, msg any) {
	switch m := msg.(type) {
	case setQuota:
		env.Persist([]eventlog.Payload{eventlog.TenantQuotaSet{Tenant: p.name, MaxActive: m.n}}, m)
	case *actors.Persisted:
		p.notices = append(p.notices, m)
		if t, ok := m.Then.(tellAfter); ok {
			env.Send(actors.TenantRef(t.to), fmt.Sprintf("%s's quota %d is durable", p.name, t.n))
			return
		}
		var seen int
		env.Read(func(s *projections.Set) { seen = s.Tenant(p.name).MaxActive })
		p.d.out = append(p.d.out, fmt.Sprintf("%s persisted %v err=%v projections=%d", p.name, m.Then, m.Err, seen))
	case tellAfter:
		env.Persist([]eventlog.Payload{eventlog.TenantQuotaSet{Tenant: p.name, MaxActive: m.n}}, m)
	case relayQuota:
		env.Relay([]eventlog.Payload{eventlog.TenantQuotaSet{Tenant: p.name, MaxActive: m.n}}, actors.TenantRef(m.to), seeQuota{p.name})
	case dropRelays:
		env.DropRelays()
	case seeQuota:
		var seen int
		env.Read(func(s *projections.Set) { seen = s.Tenant(m.of).MaxActive })
		p.d.out = append(p.d.out, fmt.Sprintf("%s sees %s's quota %d, from %s", p.name, m.of, seen, env.Sender().ID))
	case arm:
		p.timer = env.After(m.d, ring{})
	case cancel:
		env.Cancel(p.timer)
	case ring:
		p.d.out = append(p.d.out, p.name+" rang")
	case stopSelf:
		env.Stop(actors.TenantRef(p.name))
	case breakIt:
		p.bad = true
	default:
		p.d.out = append(p.d.out, fmt.Sprintf("%s got %v (recovered %d)", p.name, msg, p.recovers))
	}
}

func (p *probe) CheckInvariants() error {
	if p.bad {
		return errors.New("told to break")
	}
	return nil
}

// The ordering rules, each a script: what is sent, what happens to the log and the clock, and
// what the probes and the outside world see.
func TestOrderingRules(t *testing.T) {
	a := actors.TenantRef("a")
	for _, tc := range []struct {
		name   string
		script func(d *driver)
		want   []string
	}{{
		name: "Persisted comes only once durable, with the events applied",
		script: func(d *driver) {
			d.rt.Send(a, setQuota{7}, actors.Ref{})
			d.run() // decided, not durable: nothing comes back
			d.out = append(d.out, "synced")
			d.sync(nil)
			d.run()
		},
		want: []string{"synced", "a persisted {7} err=<nil> projections=7"},
	}, {
		name: "persists complete in the order made",
		script: func(d *driver) {
			d.rt.Send(a, setQuota{1}, actors.Ref{})
			d.rt.Send(a, setQuota{2}, actors.Ref{})
			d.run()
			d.sync(nil)
			d.run()
		},
		want: []string{"a persisted {1} err=<nil> projections=2", "a persisted {2} err=<nil> projections=2"},
	}, {
		name: "a relay sends its message once durable, with the events applied, as from its maker; nothing if its commit fails",
		script: func(d *driver) {
			d.rt.Send(a, relayQuota{n: 5, to: "b"}, actors.Ref{})
			d.run()
			d.out = append(d.out, "synced")
			d.sync(nil)
			d.run()
			d.rt.Send(a, relayQuota{n: 6, to: "b"}, actors.Ref{})
			d.run()
			d.sync(errors.New("fsync failed"))
			d.run()
		},
		want: []string{"synced", "b sees a's quota 5, from a"},
	}, {
		name: "a relay dropped before it is durable commits its events and sends nothing; a later one sends",
		script: func(d *driver) {
			d.rt.Send(a, relayQuota{n: 5, to: "b"}, actors.Ref{})
			d.rt.Send(a, dropRelays{}, actors.Ref{})
			d.rt.Send(a, relayQuota{n: 6, to: "c"}, actors.Ref{})
			d.run()
			d.sync(nil)
			d.run()
		},
		want: []string{"c sees a's quota 6, from a"},
	}, {
		name: "a failed commit applies nothing and says so",
		script: func(d *driver) {
			d.rt.Send(a, setQuota{3}, actors.Ref{})
			d.run()
			d.sync(errors.New("fsync failed"))
			d.run()
		},
		want: []string{"a persisted {3} err=fsync failed projections=0"},
	}, {
		name: "a restart drops the old incarnation's Persisted and timers and recovers once",
		script: func(d *driver) {
			d.rt.Send(a, arm{time.Second}, actors.Ref{})
			d.rt.Send(a, setQuota{4}, actors.Ref{})
			d.run()
			d.sync(nil) // Persisted for incarnation 0 is queued
			d.rt.Restart(d.rt.Bound(a), nil)
			d.run()
			d.advance(2 * time.Second)
			d.run()
			d.rt.Send(a, "hello", actors.Ref{})
			d.run()
		},
		want: []string{"a got hello (recovered 1)"},
	}, {
		name: "a cancelled timer never fires; one left alone does",
		script: func(d *driver) {
			d.rt.Send(a, arm{time.Second}, actors.Ref{})
			d.rt.Send(a, cancel{}, actors.Ref{})
			d.run()
			d.advance(time.Minute)
			d.run()
			d.out = append(d.out, "cancelled")
			d.rt.Send(a, arm{time.Second}, actors.Ref{})
			d.run()
			d.advance(time.Minute)
			d.run()
		},
		want: []string{"cancelled", "a rang"},
	}, {
		name: "a stop takes what was sent before it; what comes after makes a new cell",
		script: func(d *driver) {
			d.rt.Send(a, "first", actors.Ref{})
			d.rt.Send(a, stopSelf{}, actors.Ref{})
			d.run()
			if d.rt.Bound(a) != nil {
				d.out = append(d.out, "the stopped cell is still bound")
			}
			d.rt.Send(a, "second", actors.Ref{})
			d.run()
			if d.rt.Bound(a) == nil {
				d.out = append(d.out, "no new cell is bound")
			}
		},
		want: []string{"a got first (recovered 1)", "a got second (recovered 1)"},
	}, {
		name: "an assignment to a session that is gone bounces to the dispatcher as Undelivered",
		script: func(d *driver) {
			d.rt.Spawn(actors.DispatcherRef(), func() actors.Behaviour { return &probe{d: d, name: "dispatcher"} })
			d.rt.Send(actors.SessionRef("gone"), actors.Assignment{JobID: "j", LeaseID: "l"}, actors.Ref{})
			d.rt.Send(actors.SessionRef("gone"), actors.CancelNotice{JobID: "j"}, actors.Ref{})
			d.run()
		},
		want: []string{"dispatcher got {j l} (recovered 1)"},
	}, {
		name: "replies reach the sender outside",
		script: func(d *driver) {
			d.rt.Spawn(actors.DispatcherRef(), func() actors.Behaviour { return &echo{} })
			d.rt.Send(actors.DispatcherRef(), "ping", actors.Ref{Kind: actors.RefExternal, ID: "caller"})
			d.run()
		},
		want: []string{"caller<-ping"},
	}, {
		name: "a broken invariant is reported after the message that broke it",
		script: func(d *driver) {
			d.rt.Send(a, breakIt{}, actors.Ref{})
			d.run()
			d.out = append(d.out, d.broken...)
		},
		want: []string{"a: told to break"},
	}, {
		name: "after Halt no behaviour runs, whatever is still handed to it",
		script: func(d *driver) {
			d.rt.Send(a, "before", actors.Ref{})
			d.run()
			d.rt.Send(a, "after", actors.Ref{})
			d.rt.Close()
			d.rt.Halt()
			d.run()
		},
		want: []string{"a got before (recovered 1)"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver()
			tc.script(d)
			if !slices.Equal(d.out, tc.want) {
				t.Fatalf("saw\n  %q\nwant\n  %q", d.out, tc.want)
			}
		})
	}
}

// echo answers its sender with what it got.
type echo struct{}

func (echo) Recover(actors.Env)              {}
func (echo) Receive(env actors.Env, msg any) { env.Send(env.Sender(), msg) }

// TestGroupCommitTellsEachCellOnce: what one group commit tells a cell (its Persisted notices,
// the relays to it) reaches it in one delivery, in the order of the commits, and the whole
// group is applied before any of it is told: an fsync of many commits wakes each actor once.
func TestGroupCommitTellsEachCellOnce(t *testing.T) {
	d := newDriver()
	a, c := actors.TenantRef("a"), actors.TenantRef("c")
	d.rt.Send(a, setQuota{1}, actors.Ref{})
	d.rt.Send(c, relayQuota{n: 8, to: "b"}, actors.Ref{})
	d.rt.Send(a, setQuota{2}, actors.Ref{})
	d.rt.Send(c, relayQuota{n: 9, to: "b"}, actors.Ref{})
	d.rt.Send(a, relayQuota{n: 3, to: "b"}, actors.Ref{})
	d.run()
	d.sync(nil)
	var to []string
	for _, q := range d.queue {
		to = append(to, q.c.Ref().ID)
	}
	if want := []string{"a", "b"}; !slices.Equal(to, want) {
		t.Fatalf("the group commit made deliveries to %q, want one to each of %q", to, want)
	}
	d.run()
	want := []string{
		"a persisted {1} err=<nil> projections=3", "a persisted {2} err=<nil> projections=3",
		"b sees c's quota 9, from c", "b sees c's quota 9, from c", "b sees a's quota 3, from a",
	}
	if !slices.Equal(d.out, want) {
		t.Fatalf("saw\n  %q\nwant\n  %q", d.out, want)
	}
}

// TestStopSelfCostsNoDelivery: a cell that stops itself is unbound on its turn, with no stop
// delivery after it (a job's cell does so when its lease's end is durable); what was sent to
// it before still runs on it, and what comes after makes a new cell.
func TestStopSelfCostsNoDelivery(t *testing.T) {
	d := newDriver()
	a := actors.TenantRef("a")
	d.rt.Send(a, "first", actors.Ref{})
	d.rt.Send(a, stopSelf{}, actors.Ref{})
	d.rt.Send(a, "queued before the stop", actors.Ref{})
	handled := 0
	for len(d.queue) > 0 {
		q := d.queue[0]
		d.queue = d.queue[1:]
		d.rt.Handle(q.c, q.d)
		handled++
	}
	if handled != 3 {
		t.Fatalf("%d deliveries for three messages and a stop of itself, want 3", handled)
	}
	if d.rt.Bound(a) != nil {
		t.Fatal("the stopped cell is still bound")
	}
	d.rt.Send(a, "after", actors.Ref{})
	d.run()
	want := []string{"a got first (recovered 1)", "a got queued before the stop (recovered 1)", "a got after (recovered 1)"}
	if !slices.Equal(d.out, want) {
		t.Fatalf("saw\n  %q\nwant\n  %q", d.out, want)
	}
}

// TestBatchTurnSendsOncePerCell: what a cell sends on the turn of a group commit's notices goes
// to each cell in one delivery at the end of the turn (a tenant's enqueues of the submits one
// fsync made durable reach the dispatcher together), in the order sent.
func TestBatchTurnSendsOncePerCell(t *testing.T) {
	d := newDriver()
	a := actors.TenantRef("a")
	for n := range 3 {
		d.rt.Send(a, tellAfter{n: n, to: "b"}, actors.Ref{})
	}
	d.run()
	d.sync(nil)
	d.handled = 0
	d.run()
	want := []string{"b got a's quota 0 is durable (recovered 1)", "b got a's quota 1 is durable (recovered 1)", "b got a's quota 2 is durable (recovered 1)"}
	if !slices.Equal(d.out, want) {
		t.Fatalf("saw\n  %q\nwant\n  %q", d.out, want)
	}
	if d.handled != 2 {
		t.Fatalf("%d deliveries after the sync, want 2: the three Persisted to a in one, a's three messages to b in one", d.handled)
	}
}

// TestNoticesAreNotReused: a persist's Commit, which holds its Persisted notice, is carved from
// chunks a cell shares among its persists, but never used twice: every notice a cell was told
// and kept still says what it said, after many more persists (more than a chunk holds), alone
// and in groups, have been told.
func TestNoticesAreNotReused(t *testing.T) {
	d := newDriver()
	a := actors.TenantRef("a")
	const persists = 100
	for n := 1; n <= persists; n++ {
		d.rt.Send(a, setQuota{n}, actors.Ref{})
		d.run()
		if n%3 != 0 { // some commits alone, some three to a group
			d.sync(nil)
			d.run()
		}
	}
	d.sync(nil)
	d.run()
	notices := d.probes["a"].notices
	if len(notices) != persists {
		t.Fatalf("a was told %d notices; want %d", len(notices), persists)
	}
	for i, m := range notices {
		if want := (setQuota{i + 1}); m.Then != want || m.Receipt.Last != uint64(i+1) || m.Err != nil {
			t.Errorf("notice %d says %v, seq %d, err %v; it said %v, seq %d", i, m.Then, m.Receipt.Last, m.Err, want, i+1)
		}
	}
}
