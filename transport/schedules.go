package transport

import (
	"net/http"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/wire"
)

// createSchedule serves POST /v1/schedules: 201 with the schedule, or 200 with the schedule the
// tenant already has under the name with the same definition (idempotent_hit).
func (s *Server) createSchedule(r *request) error {
	var req wire.ScheduleRequest
	if err := r.decode(int64(actors.DefaultPayloadBytesMax+envelopeBytes), &req); err != nil {
		return err
	}
	job, err := specOf(req.Job, "")
	if err != nil {
		return err
	}
	id, existing, rc, err := r.b.CreateSchedule(r.Context(), actors.CreateSchedule{Tenant: r.by.tenant, APIKeyID: r.by.apiKeyID,
		Spec: actors.ScheduleSpec{Name: req.Name, Cron: req.Cron, Timezone: req.Timezone, Job: job, Overlap: req.Overlap, CatchUp: req.CatchUp}})
	if err != nil {
		return err
	}
	out, ok := scheduleOf(r.b, r.by.tenant, id, s.clock())
	if !ok {
		return errorf(actors.CodeScheduleNotFound, "schedule %s was deleted meanwhile", id)
	}
	out.Receipt, out.IdempotentHit = new(receipt(rc)), &existing
	status := http.StatusCreated
	if existing {
		status = http.StatusOK
	}
	return r.reply(status, out)
}

// scheduleOf reads a tenant's schedule as the wire has it, at now.
func scheduleOf(b Core, tenant, id string, now time.Time) (wire.Schedule, bool) {
	var c *projections.Schedule
	b.Read(func(s *projections.Set) {
		if x, ok := s.Schedule(id); ok && x.Tenant == tenant {
			c = x
		}
	})
	if c == nil {
		return wire.Schedule{}, false
	}
	return wireSchedule(c, now), true
}

func wireSchedule(c *projections.Schedule, now time.Time) wire.Schedule {
	j := c.Job
	out := wire.Schedule{
		ID: c.ID, Tenant: c.Tenant, Name: c.Name, Cron: c.Cron, Timezone: c.Timezone, Overlap: c.Overlap, CatchUp: c.CatchUp,
		Status: "active", Fired: c.Fired, Skipped: c.Skipped, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt,
		Job: wire.ScheduleJob{Queue: j.Queue, Type: j.Type, Payload: j.Payload, Priority: j.Priority, MaxAttempts: j.MaxAttempts,
			LeaseTTLSeconds: float64(j.LeaseTTLMillis) / 1000, Labels: j.Labels, ResultTTLSeconds: float64(j.ResultTTLMillis) / 1000,
			ConcurrencyKey: j.ConcurrencyKey, RateLimits: wireRateLimits(j.RateLimits)},
	}
	if out.Job.Labels == nil {
		out.Job.Labels = map[string]string{}
	}
	if out.Skipped == nil {
		out.Skipped = map[string]int{}
	}
	if c.Paused {
		out.Status = "paused"
	} else if next := actors.NextTick(c, now); !next.IsZero() {
		out.NextFireAt = &next
	}
	if !c.LastTick.IsZero() {
		out.LastTick = new(c.LastTick)
	}
	if c.LastJobID != "" {
		out.LastFire = &wire.ScheduleFire{JobID: c.LastJobID, FiredAt: c.LastFiredAt}
	}
	return out
}

func scheduleNotFound(id string) error {
	return errorf(actors.CodeScheduleNotFound, "no schedule %q", clip(id))
}

func (s *Server) getSchedule(r *request) error {
	out, ok := scheduleOf(r.b, r.by.tenant, r.PathValue("id"), s.clock())
	if !ok {
		return scheduleNotFound(r.PathValue("id"))
	}
	return r.reply(http.StatusOK, out)
}

func (s *Server) listSchedules(r *request) error {
	var all []*projections.Schedule
	r.b.Read(func(set *projections.Set) { all = set.Schedules(r.by.tenant) })
	now := s.clock()
	out := wire.ScheduleList{Schedules: make([]wire.Schedule, len(all))}
	for i, c := range all {
		out.Schedules[i] = wireSchedule(c, now)
	}
	return r.reply(http.StatusOK, out)
}

// pauseSchedule serves POST /v1/schedules/{id}/pause and /resume; asking for the state the
// schedule is in answers it unchanged, without a receipt.
func (s *Server) pauseSchedule(paused bool) func(*request) error {
	return func(r *request) error {
		id := r.PathValue("id")
		rc, err := r.b.PauseSchedule(r.Context(), r.by.tenant, r.by.apiKeyID, id, paused)
		if err != nil {
			return err
		}
		out, ok := scheduleOf(r.b, r.by.tenant, id, s.clock())
		if !ok {
			return scheduleNotFound(id)
		}
		if rc.Seq != 0 {
			out.Receipt = new(receipt(rc))
		}
		return r.reply(http.StatusOK, out)
	}
}

func (s *Server) deleteSchedule(r *request) error {
	id := r.PathValue("id")
	rc, err := r.b.DeleteSchedule(r.Context(), r.by.tenant, r.by.apiKeyID, id)
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.Deleted{ID: id, Deleted: true, Receipt: new(receipt(rc))})
}
