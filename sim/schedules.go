package sim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
)

// Schedules in the simulator: clients create schedules that tick every few seconds or every
// minute or two, under a name they reuse (so that a create meets its own schedule, or another
// definition under the name), and pause, resume and delete them. The oracle checks that each
// schedule decides its ticks in order, each once, none skipped silently and none before its
// time, and that a skip counts the ticks it skips ("schedule_ticks"); that none fires while paused or deleted; that a fire under overlap:
// skip never comes while the job of the last firing has never ended, and that only catch_up:
// one fires late ("schedule_policy"). After heal, every schedule still active must decide a
// tick after the heal, which shows its timer survived every crash; the simulator then pauses
// it, so the run can settle.

// osched is the oracle's fold of a schedule.
type osched struct {
	id, tenant       string
	sched            cron.Schedule
	overlap, catchUp string
	anchor           time.Time // ticks after it are due: creation, last resume, last decided tick
	lastJob          string
	paused, deleted  bool
	pauseAsked       bool // the liveness phase asked for its pause
}

var simCrons = []string{"@every 10s", "@every 25s", "* * * * *", "*/2 * * * *", "@every 150s"}

// createSchedule creates a schedule under one of three names of the client's, with a random
// definition; a timeout sends the same create again, which answers the schedule it made.
func (c *client) createSchedule() {
	r := c.s.flowRand
	spec := actors.ScheduleSpec{
		Name: fmt.Sprintf("%s-s%d", c.name, r.IntN(3)), Cron: simCrons[r.IntN(len(simCrons))],
		Job: actors.JobSpec{Queue: fmt.Sprintf("q%d", r.IntN(2)), Type: "tick", MaxAttempts: 1 + r.IntN(2),
			LeaseTTL: time.Duration(5+r.IntN(25)) * time.Second},
		Overlap: []string{eventlog.OverlapSkip, eventlog.OverlapAllow}[r.IntN(2)],
		CatchUp: []string{eventlog.CatchUpNone, eventlog.CatchUpOne}[r.IntN(2)],
	}
	if r.IntN(3) == 0 {
		spec.Timezone = "America/New_York"
	}
	c.sendSchedule(actors.CreateSchedule{Tenant: c.tenant, Spec: spec}, 0)
}

func (c *client) sendSchedule(m actors.CreateSchedule, attempt int) {
	c.s.call(c.name, "create schedule", toRef(actors.TenantRef(c.tenant)), m, func(reply any) {
		if r := reply.(actors.ScheduleMade); r.Err == nil && !slices.Contains(c.schedules, r.ID) {
			c.schedules = append(c.schedules, r.ID)
		}
	}, func() {
		if attempt < 2 {
			c.sendSchedule(m, attempt+1)
		}
	})
}

// changeSchedule pauses, resumes or deletes one of the client's schedules.
func (c *client) changeSchedule() {
	s := c.s
	if len(c.schedules) == 0 {
		return
	}
	r := s.flowRand
	id := c.schedules[r.IntN(len(c.schedules))]
	var msg any = actors.PauseSchedule{Tenant: c.tenant, ID: id, Paused: r.IntN(2) == 0}
	if r.IntN(4) == 0 {
		msg = actors.DeleteSchedule{Tenant: c.tenant, ID: id}
	}
	s.call(c.name, fmt.Sprintf("%T", msg), toRef(actors.TenantRef(c.tenant)), msg, func(any) {}, nil)
}

// schedule folds a schedule's events and checks them; decidedAt is the server clock when the
// tenant decided the record, -1 clock if unknown.
func (o *oracle) schedule(seq uint64, at time.Time, p eventlog.Payload, decidedAt time.Time, clock int) {
	if e, ok := p.(eventlog.ScheduleCreated); ok {
		sched, r := actors.ParseCron(e.Cron, e.Timezone)
		if r != nil || o.schedules[e.ScheduleID] != nil {
			o.fail("schedule_ticks", "schedule %s created twice, or with cron %q that does not parse (seq %d)", e.ScheduleID, e.Cron, seq)
			return
		}
		o.schedules[e.ScheduleID] = &osched{id: e.ScheduleID, tenant: e.Tenant, sched: sched, overlap: e.Overlap, catchUp: e.CatchUp, anchor: at}
		return
	}
	id := p.Stream()[len("schedule/"):]
	c := o.schedules[id]
	if c == nil || c.deleted {
		o.fail("schedule_ticks", "%s for schedule %s, which does not exist (seq %d)", p.EventType(), id, seq)
		return
	}
	// decide checks that a decision takes the schedule's next ticks, from its first due one.
	decide := func(from, to time.Time) bool {
		switch want := c.sched.Next(c.anchor); {
		case c.paused:
			o.fail("schedule_ticks", "schedule %s decided ticks %s..%s while paused (seq %d)", id, from, to, seq)
		case !from.Equal(want):
			o.fail("schedule_ticks", "schedule %s decided ticks from %s, but its next tick was %s (seq %d)", id, from.Format(time.RFC3339), want.Format(time.RFC3339), seq)
		case to.Before(from) || (clock >= 0 && to.After(decidedAt)):
			o.fail("schedule_ticks", "schedule %s decided ticks %s..%s at %s, before their time (seq %d)", id, from, to, decidedAt, seq)
		default:
			c.anchor = to
			return true
		}
		return false
	}
	decided := false
	switch e := p.(type) {
	case eventlog.ScheduleFired:
		if decided = decide(e.Tick, e.Tick); !decided {
			return
		}
		if prev := o.jobs[c.lastJob]; c.overlap == eventlog.OverlapSkip && prev != nil && prev.finishedAt.IsZero() {
			o.fail("schedule_policy", "schedule %s (overlap: skip) fired tick %s while job %s of its last firing had never ended (seq %d)", id, e.Tick, c.lastJob, seq)
		}
		if e.Late {
			o.s.probe(ProbeScheduleLate)
			if c.catchUp != eventlog.CatchUpOne {
				o.fail("schedule_policy", "schedule %s (catch_up: %s) fired tick %s late (seq %d)", id, c.catchUp, e.Tick, seq)
			}
		} else if clock >= 0 && decidedAt.Sub(e.Tick) > actors.ScheduleGrace {
			o.fail("schedule_policy", "schedule %s fired tick %s on time at %s, past the grace (seq %d)", id, e.Tick, decidedAt, seq)
		}
		c.lastJob = e.JobID
		o.s.probe(ProbeScheduleFired)
	case eventlog.ScheduleSkipped:
		if decided = decide(e.From, e.To); !decided {
			return
		}
		ticks := 0
		for tick := e.From; !tick.After(e.To); tick = c.sched.Next(tick) {
			ticks++
		}
		if e.Ticks != ticks {
			o.fail("schedule_ticks", "schedule %s skipped ticks %s..%s, which are %d, as %d (seq %d)", id, e.From.Format(time.RFC3339), e.To.Format(time.RFC3339), ticks, e.Ticks, seq)
		}
		if e.Reason == eventlog.SkippedTickOverlap && (c.overlap != eventlog.OverlapSkip || c.lastJob == "") {
			o.fail("schedule_policy", "schedule %s (overlap: %s) skipped tick %s for an overlap (seq %d)", id, c.overlap, e.From, seq)
		}
	case eventlog.SchedulePaused:
		c.paused = true
	case eventlog.ScheduleResumed:
		c.paused, c.anchor = false, at
	case eventlog.ScheduleDeleted:
		c.deleted = true
	}
	if decided && o.s.phase == phaseLiveness && !c.pauseAsked && c.anchor.After(o.s.healedAt.Add(o.s.clockOffset)) {
		// It decided a tick after the heal: its timer runs. Pause it, so the run can settle.
		c.pauseAsked = true
		o.s.after(0, "pause schedule "+id, func() {
			if v := o.s.srv; v.up {
				v.request("admin", actors.TenantRef(c.tenant), actors.PauseSchedule{Tenant: c.tenant, ID: id, Paused: true}, func(any) {})
			}
		})
	}
}

// scheduleJobSubmitted checks that a job a schedule fired came with its schedule.fired.
func (o *oracle) scheduleJobSubmitted(seq uint64, e eventlog.JobSubmitted) {
	if c := o.schedules[e.ScheduleID]; c == nil || c.lastJob != e.JobID {
		o.fail("schedule_ticks", "job %s says schedule %s fired it, which the schedule's events do not (seq %d)", e.JobID, e.ScheduleID, seq)
	}
}

// unsettledSchedule names a schedule still active, or "".
func (o *oracle) unsettledSchedule() string {
	for _, id := range slices.Sorted(maps.Keys(o.schedules)) {
		if c := o.schedules[id]; !c.paused && !c.deleted {
			return fmt.Sprintf("schedule %s has decided no tick since the heal", id)
		}
	}
	return ""
}
