package audit

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// StateAt replays the records 1..seq into a fresh Set: the projections exactly as the server
// held them once it had applied record seq. It checks the chain on the way.
func StateAt(ctx context.Context, l *eventlog.Log, seq uint64, progress Progress) (*projections.Set, eventlog.Head, error) {
	head := eventlog.Head{Hash: eventlog.Genesis}
	if seq > l.Head().Seq {
		return nil, head, fmt.Errorf("%w: seq %d is beyond the head of the log, seq %d", eventlog.ErrNotFound, seq, l.Head().Seq)
	}
	set := projections.New()
	if seq == 0 {
		return set, head, nil // Verified reads 0 as "to the head"
	}
	for r, err := range l.Verified(ctx, seq) {
		if err != nil {
			return nil, head, err
		}
		if err := set.ApplyRecord(r); err != nil {
			return nil, head, &FoldError{Seq: r.Seq, Err: err}
		}
		head = eventlog.Head{Seq: r.Seq, Hash: r.Hash, Time: r.Time}
		progress.report(r.Seq, seq, false)
	}
	progress.report(head.Seq, seq, true)
	return set, head, nil
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
	st := State{Seq: head.Seq, Hash: head.Hash.String(), Time: head.Time, Jobs: set.StatusCounts(head.Time)}
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
	return st
}
