package actors

import (
	"bytes"
	"encoding/json"
	"math/bits"
	"strings"
	"time"
	_ "time/tzdata" // time zones work on a machine without a zoneinfo database

	"github.com/oklog/ulid/v2"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Schedules (docs/design.md §9) are decided by their tenant's actor, which submits the jobs they
// fire as its own. It keeps a timer per schedule that is not paused, and at each one reads the
// schedule from the projections: the ticks due are those after its anchor (creation, last resume,
// or last tick decided) up to now. A tick is decided once, by one event (fired or skipped), and
// the next decision waits until that event is durable, so a schedule fires at most once per tick
// across crashes: a restart reads the last decided tick from the log.
//
// What a decision does with its due ticks:
//   - the newest tick, if it is at most ScheduleGrace old, is on time and fires;
//   - otherwise it was missed (the server was down, or its clock jumped), and fires late under
//     catch_up: one, or is skipped under catch_up: none;
//   - the older ticks were all missed, and are skipped in one event, which counts them;
//   - a tick that would fire is skipped instead under overlap: skip while the job of the last
//     firing is live, and when the tenant's max_active is reached.

// Schedule limits.
const (
	SchedulesMax       = 1000 // per tenant
	ScheduleNameLenMax = 128
	CronLenMax         = 256
	TimezoneLenMax     = 64
	// ScheduleEveryMin and ScheduleEveryMax bound an @every interval, which is a whole number of
	// seconds: the cron library would take anything shorter as a second, and drop fractions.
	ScheduleEveryMin = time.Second
	ScheduleEveryMax = 365 * 24 * time.Hour
	// ScheduleGrace is how late a tick may be decided and still be on time: past it, the
	// tick was missed, and catch_up says what becomes of it.
	ScheduleGrace = time.Minute
	// scheduleRecheckMax is the longest a schedule's timer waits: a wall clock set forward is
	// noticed within it, as the timer runs on the runtime's (monotonic) timers.
	scheduleRecheckMax = time.Minute
)

// ScheduleSpec is a schedule as a client creates it.
type ScheduleSpec struct {
	Name string
	// Cron is a standard five-field expression (minute hour day-of-month month day-of-week) or a
	// descriptor (@hourly, @daily, @weekly, @monthly, @yearly, @every 90s, whole seconds in
	// ScheduleEveryMin..ScheduleEveryMax), read in Timezone (an IANA name; "" is UTC).
	Cron     string
	Timezone string
	// Job is the job each firing submits; it takes no delay, run_at, idempotency key or
	// reservation.
	Job JobSpec
	// Overlap is eventlog.OverlapSkip (the default) or OverlapAllow; CatchUp is
	// eventlog.CatchUpOne (the default) or CatchUpNone.
	Overlap string
	CatchUp string
}

// CreateSchedule asks a tenant to create a schedule; ScheduleMade answers. Creating a schedule
// again with the same name and definition answers the existing one (Existing), so a deploy
// script can create its schedules every time it runs.
type CreateSchedule struct {
	Tenant   string
	Spec     ScheduleSpec
	APIKeyID string
}

// ScheduleMade answers CreateSchedule.
type ScheduleMade struct {
	ID       string
	Existing bool
	Receipt  Receipt
	Err      *Rejection
}

// PauseSchedule pauses a schedule (Paused) or resumes it; Done answers. A resumed schedule fires
// at its ticks after the resume, none of those it had while paused. Asking for the state the
// schedule is in changes nothing.
type PauseSchedule struct {
	Tenant   string
	ID       string
	Paused   bool
	APIKeyID string
}

// DeleteSchedule ends a schedule; Done answers. The jobs it fired are not touched.
type DeleteSchedule struct {
	Tenant   string
	ID       string
	APIKeyID string
}

// scheduleTick is a schedule's timer.
type scheduleTick struct{ id string }

// scheduleDone is a schedule's decision or change made durable.
type scheduleDone struct {
	id      string
	reply   Ref
	create  bool
	name    string // of a create, pending until now
	waiting []Waiting
}

// ParseCron reads a cron expression in a time zone, as schedules do. The time zone is given
// apart, never inside the expression (CRON_TZ=), so each schedule states it once.
func ParseCron(expr, timezone string) (cron.Schedule, *Rejection) {
	bad := func(field, format string, args ...any) (cron.Schedule, *Rejection) {
		r := reject(CodeInvalidSchedule, format, args...)
		r.Details = map[string]any{"field": field}
		return nil, r
	}
	if timezone == "" {
		timezone = "UTC"
	}
	if len(timezone) > TimezoneLenMax || timezone == "Local" {
		return bad("timezone", "timezone %q is not an IANA time zone name", clip(timezone))
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil {
		return bad("timezone", "timezone %q is not an IANA time zone name", clip(timezone))
	}
	if expr = strings.TrimSpace(expr); expr == "" || len(expr) > CronLenMax {
		return bad("cron", "cron must be 1..%d bytes", CronLenMax)
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return bad("cron", "give the time zone as timezone, not in the cron expression")
	}
	parser := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	sched, err := parser.Parse(expr)
	if err != nil {
		return bad("cron", "cron %q: %v", clip(expr), err)
	}
	if spec, ok := sched.(*cron.SpecSchedule); ok {
		spec.Location = loc
	}
	return sched, nil
}

// NextTick is a schedule's next tick after now, or the zero time if it is paused or its cron
// never matches again.
func NextTick(c *projections.Schedule, now time.Time) time.Time {
	sched, r := ParseCron(c.Cron, c.Timezone)
	if r != nil || c.Paused {
		return time.Time{}
	}
	due, next := ticksDue(sched, c.Anchor(), now)
	if !due.last.IsZero() { // a tick is due this instant: the next is the one after it
		next = sched.Next(due.last)
	}
	return next.UTC()
}

// latestBefore returns the newest tick strictly before t and strictly after floor, or the zero
// time, of a cron whose ticks are calendar times (not @every). It looks back over windows that
// double, so it costs a few dozen Next calls for any cron, however long ago floor is.
func latestBefore(sched cron.Schedule, t, floor time.Time) time.Time {
	for w := time.Second; ; w *= 2 {
		from := t.Add(-w)
		if !from.After(floor) {
			from = floor
		}
		if c := sched.Next(from); !c.IsZero() && c.Before(t) {
			for { // the window holds a tick: walk to the last one before t
				n := sched.Next(c)
				if n.IsZero() || !n.Before(t) {
					return c
				}
				c = n
			}
		}
		if from.Equal(floor) {
			return time.Time{}
		}
	}
}

// dueTicks are a schedule's undecided ticks up to now: first and last, and the one before last
// (zero when first is last).
type dueTicks struct{ first, beforeLast, last time.Time }

func ticksDue(sched cron.Schedule, anchor, now time.Time) (due dueTicks, next time.Time) {
	first := sched.Next(anchor)
	if first.IsZero() || first.After(now) {
		return dueTicks{}, first
	}
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		// Its ticks are first + k * Delay: they count from the anchor, not from the calendar,
		// so looking back from another time would find other ticks.
		k := now.Sub(first) / every.Delay
		due = dueTicks{first: first, last: first.Add(k * every.Delay)}
		if k > 0 {
			due.beforeLast = due.last.Add(-every.Delay)
		}
		return due, time.Time{}
	}
	last := latestBefore(sched, now.Add(time.Nanosecond), anchor)
	due = dueTicks{first: first, last: last}
	if last.After(first) {
		due.beforeLast = latestBefore(sched, last, anchor)
	}
	return due, time.Time{}
}

// tickCount counts a schedule's ticks from from, one of them, to to, both included. It counts a
// calendar cron's whole days of 24 hours (no clock change) at once, so a clock set years ahead
// costs a few Next calls a day, not one a tick.
func tickCount(sched cron.Schedule, from, to time.Time) int {
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		return int(to.Sub(from)/every.Delay) + 1
	}
	spec, _ := sched.(*cron.SpecSchedule)
	n := 0
	for t, firstOfDay := from, false; !t.IsZero() && !t.After(to); {
		if firstOfDay {
			start := midnight(t, spec.Location, 0)
			if end := midnight(t, spec.Location, 1); end.Sub(start) == 24*time.Hour && !end.After(to) {
				const star = 1 << 63 // the library's mark of a field given as *
				n += bits.OnesCount64(spec.Second&^star) * bits.OnesCount64(spec.Minute&^star) * bits.OnesCount64(spec.Hour&^star)
				t = sched.Next(end.Add(-time.Second)) // the first tick from end on
				continue
			}
		}
		n++
		next := sched.Next(t)
		firstOfDay = spec != nil && !next.IsZero() && !midnight(t, spec.Location, 0).Equal(midnight(next, spec.Location, 0))
		t = next
	}
	return n
}

// midnight is the start of t's day in loc, days later.
func midnight(t time.Time, loc *time.Location, days int) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d+days, 0, 0, 0, 0, loc)
}

// decideTicks decides a schedule's due ticks (see the top of this file). fire is the tick to
// fire, if any; prevLive says whether the job of the last firing is live, quotaFull whether
// the tenant can take no job now.
func decideTicks(c *projections.Schedule, sched cron.Schedule, due dueTicks, now time.Time, prevLive, quotaFull bool) (skips []eventlog.ScheduleSkipped, fire time.Time, late bool) {
	skip := func(from, to time.Time, reason string) {
		skips = append(skips, eventlog.ScheduleSkipped{ScheduleID: c.ID, From: from.UTC(), To: to.UTC(), Reason: reason,
			Ticks: tickCount(sched, from, to)})
	}
	missedTo := due.beforeLast
	switch {
	case now.Sub(due.last) <= ScheduleGrace:
		fire = due.last
	case c.CatchUp == eventlog.CatchUpOne:
		fire, late = due.last, true
	default:
		missedTo = due.last
	}
	if !missedTo.IsZero() {
		skip(due.first, missedTo, eventlog.SkippedTickMissed)
	}
	switch {
	case fire.IsZero():
	case c.Overlap == eventlog.OverlapSkip && prevLive && !mutantFireOverlapping:
		skip(fire, fire, eventlog.SkippedTickOverlap)
		fire = time.Time{}
	case quotaFull:
		skip(fire, fire, eventlog.SkippedTickQuota)
		fire = time.Time{}
	}
	return skips, fire, late
}

// sameDefinition tells a create repeated (the same name, cron, zone, job and policies) from one
// that would change the schedule; who asked, and the id, do not count.
func sameDefinition(a, b eventlog.ScheduleCreated) bool {
	a.ScheduleID, a.APIKeyID, b.ScheduleID, b.APIKeyID = "", "", "", ""
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// scheduleEvent validates a spec and makes the schedule's creation event (without its id).
func scheduleEvent(t *Tenant, m CreateSchedule, now time.Time) (eventlog.ScheduleCreated, *Rejection) {
	spec := m.Spec
	invalid := func(field, format string, args ...any) (eventlog.ScheduleCreated, *Rejection) {
		r := reject(CodeInvalidSchedule, format, args...)
		r.Details = map[string]any{"field": field}
		return eventlog.ScheduleCreated{}, r
	}
	if !validName(spec.Name, ScheduleNameLenMax, true) {
		return invalid("name", "schedule name %q must be 1..%d of [A-Za-z0-9_.:/-]", clip(spec.Name), ScheduleNameLenMax)
	}
	if _, err := ulid.ParseStrict(spec.Name); err == nil {
		// Where a schedule is named, its id or its name will do: a name that reads as an id
		// would make `schedule delete X` delete one schedule, then another.
		return invalid("name", "schedule name %q reads as a schedule id; choose a name that does not", spec.Name)
	}
	sched, r := ParseCron(spec.Cron, spec.Timezone)
	if r != nil {
		return eventlog.ScheduleCreated{}, r
	}
	if sched.Next(now).IsZero() {
		return invalid("cron", "cron %q matches no time in the next five years", clip(spec.Cron))
	}
	if every, ok := strings.CutPrefix(strings.TrimSpace(spec.Cron), "@every "); ok {
		if d, _ := time.ParseDuration(every); d < ScheduleEveryMin || d > ScheduleEveryMax || d%time.Second != 0 {
			return invalid("cron", "@every takes whole seconds from %s to %s (a year), not %q", ScheduleEveryMin, ScheduleEveryMax, clip(every))
		}
	}
	overlap, catchUp := spec.Overlap, spec.CatchUp
	if overlap == "" {
		overlap = eventlog.OverlapSkip
	}
	if catchUp == "" {
		catchUp = eventlog.CatchUpOne
	}
	if overlap != eventlog.OverlapSkip && overlap != eventlog.OverlapAllow {
		return invalid("overlap", "overlap %q is not skip or allow", clip(overlap))
	}
	if catchUp != eventlog.CatchUpNone && catchUp != eventlog.CatchUpOne {
		return invalid("catch_up", "catch_up %q is not none or one", clip(catchUp))
	}
	job := spec.Job
	if r := job.normalize(t.limits); r != nil {
		r.Details = map[string]any{"field": "job"}
		return eventlog.ScheduleCreated{}, r
	}
	if job.Delay != 0 || !job.RunAt.IsZero() || job.IdempotencyKey != "" || job.ReservationID != "" {
		return invalid("job", "a schedule's job takes no delay, run_at, idempotency key or reservation")
	}
	timezone := spec.Timezone
	if timezone == "" {
		timezone = "UTC"
	}
	return eventlog.ScheduleCreated{Tenant: t.name, Name: spec.Name, Cron: strings.TrimSpace(spec.Cron), Timezone: timezone,
		Job: job.template(), Overlap: overlap, CatchUp: catchUp, APIKeyID: m.APIKeyID}, nil
}

// schedules is the part of a tenant that fires its schedules. A schedule's ticks are read from
// its projection; what the part keeps is its timers and what is in flight: each schedule's
// decision or change not durable yet (one at a time), and the names of schedules being created.
type schedules struct {
	// timers holds the timer of each schedule that is not paused.
	timers map[string]TimerID
	// busy holds the schedules with a decision or change in flight, with the number of jobs it
	// fires: 0 or 1.
	busy map[string]int
	// names holds the names of schedules being created, with their ids.
	// INVARIANT: a schedule being created has its create in flight.
	names map[string]string
	// pendingJobs counts the jobs the decisions in flight fire: they count against max_active.
	// INVARIANT: pendingJobs is the sum of busy.
	pendingJobs int
}

func (sc *schedules) reset() {
	*sc = schedules{timers: map[string]TimerID{}, busy: map[string]int{}, names: map[string]string{}}
}

func (sc *schedules) create(t *Tenant, env Env, m CreateSchedule, reply Ref) {
	ev, r := scheduleEvent(t, m, env.Now())
	if r == nil {
		r = undefinedRateLimit(env, t.name, ev.Job.RateLimits)
	}
	if r != nil {
		env.Send(reply, ScheduleMade{Err: r})
		return
	}
	if _, ok := sc.names[ev.Name]; ok { // a create of the same name is in flight
		t.pipe.whenSettled(func() { sc.create(t, env, m, reply) })
		return
	}
	var existing *projections.Schedule
	count := 0
	env.Read(func(s *projections.Set) {
		existing, count = s.ScheduleNamed(t.name, ev.Name)
	})
	if existing != nil {
		have := eventlog.ScheduleCreated{Tenant: existing.Tenant, Name: existing.Name, Cron: existing.Cron, Timezone: existing.Timezone,
			Job: existing.Job, Overlap: existing.Overlap, CatchUp: existing.CatchUp}
		if !sameDefinition(have, ev) {
			env.Send(reply, ScheduleMade{Err: &Rejection{Code: CodeScheduleExists,
				Message: "schedule " + ev.Name + " exists with another definition; delete it first", Details: map[string]any{"schedule_id": existing.ID}}})
			return
		}
		env.Send(reply, ScheduleMade{ID: existing.ID, Existing: true, Receipt: Receipt{Seq: existing.CreateSeq}})
		return
	}
	if count+len(sc.names) >= SchedulesMax {
		env.Send(reply, ScheduleMade{Err: &Rejection{Code: CodeQuotaExceeded,
			Message: "the tenant has the most schedules allowed", Details: map[string]any{"schedules_max": SchedulesMax}}})
		return
	}
	ev.ScheduleID = NewID(env)
	sc.names[ev.Name] = ev.ScheduleID
	sc.persist(t, env, []eventlog.Payload{ev}, scheduleDone{id: ev.ScheduleID, reply: reply, create: true, name: ev.Name})
}

// persist hands a schedule's decision or change to the log; the schedule takes no other
// decision until it is durable, so each reads the ones before it in the projections.
func (sc *schedules) persist(t *Tenant, env Env, events []eventlog.Payload, done scheduleDone) {
	sc.busy[done.id] = len(done.waiting)
	sc.pendingJobs += len(done.waiting)
	t.pipe.persist(env, events, done)
}

// pause pauses or resumes a schedule, and delete deletes it, once the schedule's decision in
// flight, if any, is durable.
func (sc *schedules) pause(t *Tenant, env Env, m PauseSchedule, reply Ref) {
	if _, busy := sc.busy[m.ID]; busy {
		t.pipe.whenSettled(func() { sc.pause(t, env, m, reply) })
		return
	}
	c, ok := ownSchedule(t, env, m.ID, reply)
	if !ok {
		return
	}
	if c.Paused == m.Paused {
		env.Send(reply, Done{})
		return
	}
	var ev eventlog.Payload = eventlog.ScheduleResumed{ScheduleID: c.ID, APIKeyID: m.APIKeyID}
	if m.Paused {
		ev = eventlog.SchedulePaused{ScheduleID: c.ID, APIKeyID: m.APIKeyID}
	}
	sc.persist(t, env, []eventlog.Payload{ev}, scheduleDone{id: c.ID, reply: reply})
}

func (sc *schedules) delete(t *Tenant, env Env, m DeleteSchedule, reply Ref) {
	if _, busy := sc.busy[m.ID]; busy {
		t.pipe.whenSettled(func() { sc.delete(t, env, m, reply) })
		return
	}
	if c, ok := ownSchedule(t, env, m.ID, reply); ok {
		sc.persist(t, env, []eventlog.Payload{eventlog.ScheduleDeleted{ScheduleID: c.ID, APIKeyID: m.APIKeyID}}, scheduleDone{id: c.ID, reply: reply})
	}
}

// ownSchedule reads one of the tenant's schedules, or answers SCHEDULE_NOT_FOUND.
func ownSchedule(t *Tenant, env Env, id string, reply Ref) (*projections.Schedule, bool) {
	var c *projections.Schedule
	env.Read(func(s *projections.Set) { c, _ = s.Schedule(id) })
	if c == nil || c.Tenant != t.name {
		env.Send(reply, Done{Err: reject(CodeScheduleNotFound, "no schedule %q", clip(id))})
		return nil, false
	}
	return c, true
}

// tick decides a schedule's due ticks, if it has any, and sets its timer for the next.
func (sc *schedules) tick(t *Tenant, env Env, id string) {
	if timer, ok := sc.timers[id]; ok {
		env.Cancel(timer)
		delete(sc.timers, id)
	}
	if _, busy := sc.busy[id]; busy {
		return // decided again when the decision in flight is durable
	}
	var c *projections.Schedule
	prevLive := false
	env.Read(func(s *projections.Set) {
		if c, _ = s.Schedule(id); c != nil && c.LastJobID != "" {
			j := s.JobRef(c.LastJobID)
			prevLive = j != nil && !j.Status.Terminal()
		}
	})
	if c == nil || c.Tenant != t.name || c.Paused {
		return
	}
	sched, r := ParseCron(c.Cron, c.Timezone)
	if r != nil {
		env.Log().Error("a schedule in the log does not parse", zap.String("schedule_id", id), zap.String("cron", c.Cron), zap.String("timezone", c.Timezone))
		return
	}
	now := env.Now()
	anchor := c.Anchor()
	if mutantForgetDecidedTicks {
		anchor = c.CreatedAt
	}
	due, next := ticksDue(sched, anchor, now)
	if due.last.IsZero() {
		if !next.IsZero() {
			sc.timers[id] = env.After(min(next.Sub(now), scheduleRecheckMax), scheduleTick{id})
		}
		return
	}
	quotaFull := t.full(env, 1)
	skips, fire, late := decideTicks(c, sched, due, now, prevLive, quotaFull)
	var events []eventlog.Payload
	for _, sk := range skips {
		events = append(events, sk)
	}
	done := scheduleDone{id: id}
	if !fire.IsZero() {
		job, w := t.templateJob(env, c.Job, c.Job.Payload)
		job.ScheduleID = id
		events = append(events, eventlog.ScheduleFired{ScheduleID: id, Tick: fire.UTC(), JobID: job.JobID, Late: late})
		w.SubmitSeq = uint64(len(events))
		done.waiting = []Waiting{w}
		events = append(events, job)
	}
	sc.persist(t, env, events, done)
}

func (sc *schedules) persisted(t *Tenant, env Env, d scheduleDone, m Persisted) {
	delete(sc.busy, d.id)
	sc.pendingJobs -= len(d.waiting)
	if d.create {
		delete(sc.names, d.name)
	}
	err := unavailable(m.Err)
	if err == nil {
		enqueue(env, nil, d.waiting, m.Receipt)
	}
	switch {
	case d.create:
		env.Send(d.reply, ScheduleMade{ID: d.id, Receipt: receiptOf(m.Receipt), Err: err})
	case !d.reply.IsZero():
		env.Send(d.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	}
	if err == nil {
		sc.tick(t, env, d.id) // the next tick: or, after a pause or delete, none
	}
}
