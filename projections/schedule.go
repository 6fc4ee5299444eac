package projections

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// Schedule is a schedule (docs/design.md §9): its definition, whether it is paused, and the last
// tick it decided. A deleted schedule leaves the views; its events stay in the log.
type Schedule struct {
	ID       string               `json:"id"`
	Tenant   string               `json:"tenant"`
	Name     string               `json:"name"`
	Cron     string               `json:"cron"`
	Timezone string               `json:"timezone"`
	Job      eventlog.JobTemplate `json:"job"`
	Overlap  string               `json:"overlap"`
	CatchUp  string               `json:"catch_up"`
	Paused   bool                 `json:"paused,omitempty"`
	// ResumedAt is the last resume: ticks before it were never due.
	ResumedAt time.Time `json:"resumed_at,omitzero"`
	// LastTick is the newest tick decided, fired or skipped: each tick is decided once.
	LastTick time.Time `json:"last_tick,omitzero"`
	// LastJobID is the job of the last firing, and LastFiredAt when it fired.
	LastJobID   string    `json:"last_job_id,omitempty"`
	LastFiredAt time.Time `json:"last_fired_at,omitzero"`
	// Fired counts the firings; Skipped the ticks skipped, by reason.
	Fired     int            `json:"fired"`
	Skipped   map[string]int `json:"skipped,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
	CreateSeq uint64         `json:"create_seq"`
}

// Anchor is the time after which the schedule's ticks are due: the newest of its creation, its
// last resume and its last decided tick.
func (c *Schedule) Anchor() time.Time {
	a := c.CreatedAt
	for _, t := range []time.Time{c.ResumedAt, c.LastTick} {
		if t.After(a) {
			a = t
		}
	}
	return a
}

func (c *Schedule) clone() *Schedule {
	out := *c
	out.Skipped = maps.Clone(c.Skipped)
	return &out
}

// Schedule returns a copy of a schedule, or false.
func (s *Set) Schedule(id string) (*Schedule, bool) {
	c, ok := s.schedules[id]
	if !ok {
		return nil, false
	}
	return c.clone(), true
}

// ScheduleNamed returns a copy of a tenant's schedule of that name (nil if it has none), and
// how many schedules the tenant has.
func (s *Set) ScheduleNamed(tenant, name string) (named *Schedule, count int) {
	for _, c := range s.schedules {
		if c.Tenant == tenant {
			count++
			if c.Name == name {
				named = c.clone()
			}
		}
	}
	return named, count
}

// Schedules returns copies of a tenant's schedules, by name.
func (s *Set) Schedules(tenant string) []*Schedule {
	var out []*Schedule
	for _, c := range s.schedules {
		if c.Tenant == tenant {
			out = append(out, c.clone())
		}
	}
	slices.SortFunc(out, func(a, b *Schedule) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// AllSchedules returns copies of every tenant's schedules, by tenant, then by name.
func (s *Set) AllSchedules() []*Schedule {
	out := make([]*Schedule, 0, len(s.schedules))
	for _, c := range s.schedules {
		out = append(out, c.clone())
	}
	slices.SortFunc(out, func(a, b *Schedule) int {
		return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Name, b.Name))
	})
	return out
}

// ActiveSchedules returns the ids of a tenant's schedules that are not paused, sorted.
func (s *Set) ActiveSchedules(tenant string) []string {
	var out []string
	for id, c := range s.schedules {
		if c.Tenant == tenant && !c.Paused {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// ScheduleTenants returns the tenants that have a schedule that is not paused.
func (s *Set) ScheduleTenants() map[string]bool {
	out := map[string]bool{}
	for _, c := range s.schedules {
		if !c.Paused {
			out[c.Tenant] = true
		}
	}
	return out
}

// applySchedule folds a schedule event. An event naming a schedule that does not exist, or a
// tick decided twice, is a fault in the log.
func (s *Set) applySchedule(seq uint64, at time.Time, p eventlog.Payload) error {
	if e, ok := p.(eventlog.ScheduleCreated); ok {
		s.schedules[e.ScheduleID] = &Schedule{ID: e.ScheduleID, Tenant: e.Tenant, Name: e.Name, Cron: e.Cron, Timezone: e.Timezone,
			Job: e.Job, Overlap: e.Overlap, CatchUp: e.CatchUp, CreatedAt: at, UpdatedAt: at, CreateSeq: seq}
		return nil
	}
	id := strings.TrimPrefix(p.Stream(), "schedule/")
	c := s.schedules[id]
	if c == nil {
		return fmt.Errorf("projections: seq %d: %s for unknown schedule %s", seq, p.EventType(), id)
	}
	decided := func(from, to time.Time) error {
		if !from.After(c.LastTick) || to.Before(from) {
			return fmt.Errorf("projections: seq %d: schedule %s decides ticks %s..%s after %s", seq, id,
				from.Format(time.RFC3339), to.Format(time.RFC3339), c.LastTick.Format(time.RFC3339))
		}
		c.LastTick = to
		return nil
	}
	c.UpdatedAt = at
	switch e := p.(type) {
	case eventlog.ScheduleFired:
		if err := decided(e.Tick, e.Tick); err != nil {
			return err
		}
		c.LastJobID, c.LastFiredAt = e.JobID, at
		c.Fired++
	case eventlog.ScheduleSkipped:
		if err := decided(e.From, e.To); err != nil {
			return err
		}
		if c.Skipped == nil {
			c.Skipped = map[string]int{}
		}
		c.Skipped[e.Reason] += max(e.Ticks, 1) // an event without a count was counted as one tick
	case eventlog.SchedulePaused:
		c.Paused = true
	case eventlog.ScheduleResumed:
		c.Paused, c.ResumedAt = false, at
	case eventlog.ScheduleDeleted:
		delete(s.schedules, id)
	}
	return nil
}

// scheduleList returns the schedules in id order, for a checkpoint.
func (s *Set) scheduleList() []*Schedule {
	return sortedValues(s.schedules, func(c *Schedule) string { return c.ID })
}
