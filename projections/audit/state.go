package audit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Fold is the projections as `tether replay` folds them: what is live in memory, and the
// finished jobs spilled to a scratch table on disk every spillAt changed jobs, so that an audit
// of a log of any length costs the memory of its live state, as the server does. A spill is
// written on its own goroutine while the fold goes on, as a server's checkpoint is; the fold
// reads the jobs it covers from memory until it ends. Close deletes the table.
type Fold struct {
	*projections.Set
	scratch *eventlog.Scratch
	// spill is the spill being written, nil if none, and spilled says when it is in.
	spill   *projections.Flush
	spilled chan error
}

// spillAt is how many changed jobs a Fold holds, beyond those of the spill being written,
// before it spills the finished ones.
var spillAt = 10_000

// NewFold returns the fold of the empty log, its scratch table in the system's temporary
// directory.
func NewFold() (*Fold, error) { return newFold(projections.NewOn) }

// newUnindexedFold is NewFold without the indexes that answer queries (NewUnindexedOn): what
// Verify needs, which compares folds and counts.
func newUnindexedFold() (*Fold, error) { return newFold(projections.NewUnindexedOn) }

func newFold(newSet func(projections.Store) *projections.Set) (*Fold, error) {
	scratch, err := eventlog.OpenScratch("")
	if err != nil {
		return nil, err
	}
	return &Fold{Set: newSet(scratch), scratch: scratch, spilled: make(chan error, 1)}, nil
}

// Apply folds one decoded record.
func (f *Fold) Apply(r eventlog.Record, p eventlog.Payload) error {
	if err := f.Set.Apply(r.Seq, r.Time, p); err != nil {
		return &FoldError{Seq: r.Seq, Err: err}
	}
	pending := 0
	if f.spill != nil {
		pending = f.spill.Len()
	}
	if f.Unflushed()-pending >= spillAt {
		if err := f.Settle(); err != nil {
			return err
		}
		spill := f.BeginSpill()
		f.spill = spill
		go func() {
			writes, err := spill.Writes()
			if err == nil {
				err = f.scratch.Apply(writes)
			}
			f.spilled <- err
		}()
	}
	return f.scratch.Err()
}

// Settle waits for the spill being written, if any, and ends it; it returns the first failure
// to write or read the scratch table.
func (f *Fold) Settle() error {
	if spill := f.spill; spill != nil {
		f.spill = nil // taken: Close must not wait for it again
		if err := <-f.spilled; err != nil {
			return err
		}
		f.EndFlush(spill)
	}
	return f.scratch.Err()
}

// Close deletes the scratch table.
func (f *Fold) Close() error {
	if f.spill != nil {
		<-f.spilled
		f.spill = nil
	}
	return f.scratch.Close()
}

// StateAt replays the records 1..seq into a fresh Fold: the projections exactly as the server
// held them once it had applied record seq. It checks the chain on the way. The caller closes
// the Fold.
func StateAt(ctx context.Context, l *eventlog.Log, seq uint64, progress ProgressFunc) (*Fold, eventlog.Head, error) {
	head := eventlog.Head{Hash: eventlog.Genesis}
	if seq > l.Head().Seq {
		return nil, head, fmt.Errorf("%w: seq %d is beyond the head of the log, seq %d", eventlog.ErrNotFound, seq, l.Head().Seq)
	}
	f, err := NewFold()
	if err != nil {
		return nil, head, err
	}
	if seq == 0 {
		return f, head, nil // Verified reads 0 as "to the head"
	}
	for r, err := range l.Verified(ctx, seq) {
		if err == nil {
			var p eventlog.Payload
			if p, err = eventlog.Decode(r.Type, r.Data); err != nil {
				err = &FoldError{Seq: r.Seq, Err: err}
			} else {
				err = f.Apply(r, p)
			}
		}
		if err != nil {
			_ = f.Close()
			return nil, head, err
		}
		head = eventlog.Head{Seq: r.Seq, Hash: r.Hash, Time: r.Time}
		progress.report(r.Seq, seq, false)
	}
	if err := f.Settle(); err != nil {
		_ = f.Close()
		return nil, head, err
	}
	progress.report(head.Seq, seq, true)
	return f, head, nil
}

// SeqAt returns the seq of the last record stamped at or before t, 0 if there is none. Record
// times never decrease along the log, so it is a binary search.
func SeqAt(l *eventlog.Log, t time.Time) (uint64, error) {
	n := l.Head().Seq
	var err error
	// The first seq whose record is after t; the answer is the one before it.
	after := sort.Search(int(n), func(i int) bool {
		if err != nil {
			return true
		}
		r, e := l.Get(uint64(i) + 1)
		if e != nil {
			err = e
			return true
		}
		return r.Time.After(t)
	})
	if err != nil {
		return 0, err
	}
	return uint64(after), nil
}

// State is what `tether replay state` prints: what the broker knew at one point of its log.
type State struct {
	Seq     uint64                     `json:"seq"`
	Hash    string                     `json:"hash"`
	Time    time.Time                  `json:"time,omitzero"`
	Jobs    map[projections.Status]int `json:"jobs"`
	Tenants []TenantState              `json:"tenants"`
	Leases  []LeaseState               `json:"leases"`
	Workers []WorkerState              `json:"workers"`
	// Flows counts the flows by status; LiveFlows are those running, or ended with a step's job
	// still live.
	Flows     map[projections.FlowStatus]int `json:"flows"`
	LiveFlows []FlowState                    `json:"live_flows"`
	Schedules []ScheduleState                `json:"schedules"`
}

// FlowState is one live flow; Steps counts its steps by status (waiting, skipped, or their
// job's).
type FlowState struct {
	ID     string                 `json:"id"`
	Tenant string                 `json:"tenant"`
	Name   string                 `json:"name"`
	Status projections.FlowStatus `json:"status"`
	Steps  map[string]int         `json:"steps"`
}

// ScheduleState is one schedule: its definition, whether it was paused, what it had fired and
// skipped (ticks, by reason), and the last tick it had decided.
type ScheduleState struct {
	ID        string         `json:"id"`
	Tenant    string         `json:"tenant"`
	Name      string         `json:"name"`
	Cron      string         `json:"cron"`
	Timezone  string         `json:"timezone"`
	Paused    bool           `json:"paused"`
	Fired     int            `json:"fired"`
	Skipped   map[string]int `json:"skipped"`
	LastTick  time.Time      `json:"last_tick,omitzero"`
	LastJobID string         `json:"last_job_id,omitempty"`
}

// TenantState is one tenant's quota, usage and queues.
type TenantState struct {
	Name         string                   `json:"name"`
	MaxActive    int                      `json:"max_active"`
	MaxRunning   int                      `json:"max_running"`
	Active       int                      `json:"active"`
	Running      int                      `json:"running"`
	Reservations int                      `json:"reservations"`
	Queues       []projections.QueueStats `json:"queues"`
}

// LeaseState is one active lease.
type LeaseState struct {
	JobID     string    `json:"job_id"`
	Tenant    string    `json:"tenant"`
	Queue     string    `json:"queue"`
	LeaseID   string    `json:"lease_id"`
	WorkerID  string    `json:"worker_id"`
	Attempt   int       `json:"attempt"`
	ExpiresAt time.Time `json:"expires_at"`
}

// WorkerState is one registered worker. Token hashes are left out: they are no secret, but
// nothing an auditor reads them for.
type WorkerState struct {
	ID        string   `json:"id"`
	Tenant    string   `json:"tenant"`
	Name      string   `json:"name"`
	Status    string   `json:"status"` // online, offline, revoked
	Transport string   `json:"transport,omitempty"`
	Queues    []string `json:"queues"`
	Capacity  int      `json:"capacity"`
	InFlight  []string `json:"in_flight"`
}

// Summarize reads a Set as it stood at head. Scheduled jobs whose run_at had passed at head's
// time count as queued, as they did for clients then.
func Summarize(set *projections.Set, head eventlog.Head) State {
	// Lists that hold nothing are [] in JSON, not null.
	st := State{Seq: head.Seq, Hash: head.Hash.String(), Time: head.Time, Jobs: set.StatusCounts(head.Time),
		Tenants: []TenantState{}, Leases: []LeaseState{}, Workers: []WorkerState{}, LiveFlows: []FlowState{}, Schedules: []ScheduleState{}}
	for _, name := range set.TenantNames() {
		t := set.Tenant(name)
		st.Tenants = append(st.Tenants, TenantState{
			Name: name, MaxActive: t.MaxActive, MaxRunning: t.MaxRunning, Active: t.Active,
			Running: t.Running, Reservations: len(t.Reservations), Queues: set.Queues(name, head.Time),
		})
		for _, w := range set.Workers(name) {
			ws := WorkerState{ID: w.ID, Tenant: w.Tenant, Name: w.Name, Status: w.Status, Queues: w.Queues,
				Capacity: w.Capacity, InFlight: w.InFlight}
			if w.Session != nil {
				ws.Transport = w.Session.Transport
			}
			st.Workers = append(st.Workers, ws)
		}
	}
	for _, j := range set.Leases() {
		st.Leases = append(st.Leases, LeaseState{JobID: j.ID, Tenant: j.Tenant, Queue: j.Queue, LeaseID: j.Lease.LeaseID,
			WorkerID: j.Lease.WorkerID, Attempt: j.Lease.Attempt, ExpiresAt: j.Lease.ExpiresAt})
	}
	st.Flows = set.FlowStatusCounts()
	for _, tenant := range slices.Sorted(maps.Keys(set.LiveFlowTenants())) {
		for _, id := range set.LiveFlows(tenant) {
			f, _ := set.Flow(id)
			fs := FlowState{ID: f.ID, Tenant: f.Tenant, Name: f.Name, Status: f.Status, Steps: map[string]int{}}
			for _, step := range f.State {
				fs.Steps[step.Status]++
			}
			st.LiveFlows = append(st.LiveFlows, fs)
		}
	}
	for _, c := range set.AllSchedules() {
		if c.Skipped == nil {
			c.Skipped = map[string]int{}
		}
		st.Schedules = append(st.Schedules, ScheduleState{ID: c.ID, Tenant: c.Tenant, Name: c.Name, Cron: c.Cron, Timezone: c.Timezone,
			Paused: c.Paused, Fired: c.Fired, Skipped: c.Skipped, LastTick: c.LastTick, LastJobID: c.LastJobID})
	}
	return st
}
