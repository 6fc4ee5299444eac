package actors_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
)

func scheduleSpec(cron string) actors.ScheduleSpec {
	return actors.ScheduleSpec{Name: "nightly", Cron: cron, Job: actors.JobSpec{Queue: "q", Type: "report"}, Overlap: eventlog.OverlapAllow}
}

func (f *fixture) createSchedule(spec actors.ScheduleSpec) actors.ScheduleMade {
	f.t.Helper()
	return one[actors.ScheduleMade](f.t, f.w.Call("client", actors.TenantRef("acme"), actors.CreateSchedule{Tenant: "acme", Spec: spec}))
}

func (f *fixture) mustCreateSchedule(spec actors.ScheduleSpec) string {
	f.t.Helper()
	m := f.createSchedule(spec)
	if m.Err != nil {
		f.t.Fatal(m.Err)
	}
	return m.ID
}

// decisions returns the schedule events logged after the first n records, with the jobs fired.
func (f *fixture) decisions(n int) (fired []eventlog.ScheduleFired, skipped []eventlog.ScheduleSkipped) {
	for _, p := range f.w.Since(n) {
		switch e := p.(type) {
		case eventlog.ScheduleFired:
			fired = append(fired, e)
			if j := f.job(e.JobID); j.ScheduleID != e.ScheduleID || j.Queue != "q" || j.Type != "report" {
				f.t.Fatalf("job %s fired by %s: %+v", e.JobID, e.ScheduleID, j)
			}
		case eventlog.ScheduleSkipped:
			skipped = append(skipped, e)
		}
	}
	return fired, skipped
}

// tenantDo sends a command to the tenant and returns its Done.
func (f *fixture) tenantDo(msg any) actors.Done {
	f.t.Helper()
	return one[actors.Done](f.t, f.w.Call("client", actors.TenantRef("acme"), msg))
}

// restartTenant restarts the tenant's actor and wakes it, as a starting server does
// (actors.ResumedRefs): it recovers before it handles the wake-up.
func (f *fixture) restartTenant() {
	f.w.Restart(actors.TenantRef("acme"), actors.NewTenant("acme", actors.Limits{}))
	f.w.Call("client", actors.TenantRef("acme"), actors.PauseSchedule{Tenant: "acme", ID: "none"})
}

func ticks(fired []eventlog.ScheduleFired) []string {
	var out []string
	for _, e := range fired {
		s := e.Tick.Format("15:04")
		if e.Late {
			s += " late"
		}
		out = append(out, s)
	}
	return out
}

func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	for _, c := range []struct {
		name  string
		edit  func(*actors.ScheduleSpec)
		field string
	}{
		{"bad name", func(s *actors.ScheduleSpec) { s.Name = "a b" }, "name"},
		{"a name that reads as an id", func(s *actors.ScheduleSpec) { s.Name = "01M8AQQTW3T1C31V2AGS40D8JJ" }, "name"},
		{"bad cron", func(s *actors.ScheduleSpec) { s.Cron = "61 * * * *" }, "cron"},
		{"six fields", func(s *actors.ScheduleSpec) { s.Cron = "0 0 * * * *" }, "cron"},
		{"zone inside", func(s *actors.ScheduleSpec) { s.Cron = "CRON_TZ=Europe/Paris 0 3 * * *" }, "cron"},
		{"never", func(s *actors.ScheduleSpec) { s.Cron = "0 0 30 2 *" }, "cron"},
		{"never in April", func(s *actors.ScheduleSpec) { s.Cron = "0 0 31 4 *" }, "cron"},
		{"every 0s", func(s *actors.ScheduleSpec) { s.Cron = "@every 0s" }, "cron"},
		{"every -5s", func(s *actors.ScheduleSpec) { s.Cron = "@every -5s" }, "cron"},
		{"every 1ms", func(s *actors.ScheduleSpec) { s.Cron = "@every 1ms" }, "cron"},
		{"every 1.5s", func(s *actors.ScheduleSpec) { s.Cron = "@every 1500ms" }, "cron"},
		{"every year and an hour", func(s *actors.ScheduleSpec) { s.Cron = "@every 8761h" }, "cron"},
		{"every 1000000h", func(s *actors.ScheduleSpec) { s.Cron = "@every 1000000h" }, "cron"},
		{"bad zone", func(s *actors.ScheduleSpec) { s.Timezone = "Mars/Olympus" }, "timezone"},
		{"local zone", func(s *actors.ScheduleSpec) { s.Timezone = "Local" }, "timezone"},
		{"overlap", func(s *actors.ScheduleSpec) { s.Overlap = "queue" }, "overlap"},
		{"catch up", func(s *actors.ScheduleSpec) { s.CatchUp = "all" }, "catch_up"},
		{"job queue", func(s *actors.ScheduleSpec) { s.Job.Queue = "" }, "job"},
		{"job delay", func(s *actors.ScheduleSpec) { s.Job.Delay = time.Minute }, "job"},
		{"job key", func(s *actors.ScheduleSpec) { s.Job.IdempotencyKey = "k" }, "job"},
	} {
		spec := scheduleSpec("*/5 * * * *")
		c.edit(&spec)
		m := f.createSchedule(spec)
		if m.Err == nil || m.Err.Details["field"] != c.field {
			t.Errorf("%s: %+v, want a refusal naming %s", c.name, m.Err, c.field)
		}
	}
	if got := len(f.w.Set.Schedules("acme")); got != 0 {
		t.Fatalf("%d schedules made by refused creates", got)
	}
	// The bounds of @every are taken.
	for i, cron := range []string{"@every 1s", "@every 8760h", "@every 1m30s"} {
		spec := scheduleSpec(cron)
		spec.Name = fmt.Sprintf("bound%d", i)
		if m := f.createSchedule(spec); m.Err != nil {
			t.Errorf("%s: %+v", cron, m.Err)
		}
	}
}

// TestScheduleCatchUp: ticks missed while no actor ran (the server was down) fire per
// catch_up when the tenant recovers; the newest, if within the grace, fires on time.
func TestScheduleCatchUp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		catchUp string
		down    time.Duration
		fired   []string
		skipped string // the missed ticks skipped, from-to
		missed  int    // how many they are
	}{
		{eventlog.CatchUpOne, 17 * time.Minute, []string{"14:20 late"}, "14:10-14:15", 2},
		{eventlog.CatchUpNone, 17 * time.Minute, nil, "14:10-14:20", 3},
		{eventlog.CatchUpNone, 15*time.Minute + 30*time.Second, []string{"14:20"}, "14:10-14:15", 2},
		{eventlog.CatchUpOne, 7 * time.Minute, []string{"14:10 late"}, "", 0},
	} {
		f := setup(t, nil)
		spec := scheduleSpec("*/5 * * * *")
		spec.CatchUp = c.catchUp
		n := len(f.w.Log)
		id := f.mustCreateSchedule(spec)
		f.w.Clock = f.w.Clock.Add(c.down) // no timer runs: the server is down
		f.restartTenant()
		fired, skipped := f.decisions(n)
		got := ""
		for _, s := range skipped {
			if s.Reason != eventlog.SkippedTickMissed {
				t.Fatalf("skipped %+v", s)
			}
			got = s.From.Format("15:04") + "-" + s.To.Format("15:04")
		}
		if g := ticks(fired); len(g) != len(c.fired) || (len(g) > 0 && g[0] != c.fired[0]) || got != c.skipped || len(skipped) > 1 {
			t.Errorf("catch_up %s, down %s: fired %v, skipped %s; want %v, %s", c.catchUp, c.down, g, got, c.fired, c.skipped)
		}
		// Skips count ticks, not decisions.
		if s, _ := f.w.Set.Schedule(id); s.Skipped[eventlog.SkippedTickMissed] != c.missed || (len(skipped) == 1 && skipped[0].Ticks != c.missed) {
			t.Errorf("catch_up %s, down %s: skipped %+v, counted %v; want %d missed", c.catchUp, c.down, skipped, s.Skipped, c.missed)
		}
	}
}

func TestScheduleSkipsWhenTheQuotaIsFull(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	one := 1
	f.tenantDo(actors.SetQuota{Tenant: "acme", MaxActive: &one})
	f.mustSubmit(actors.JobSpec{Queue: "q", Type: "t"})
	n := len(f.w.Log)
	f.mustCreateSchedule(scheduleSpec("*/5 * * * *"))
	f.w.Advance(6 * time.Minute)
	if fired, skipped := f.decisions(n); len(fired) != 0 || len(skipped) != 1 || skipped[0].Reason != eventlog.SkippedTickQuota {
		t.Fatalf("fired %v, skipped %+v", ticks(fired), skipped)
	}
}

// TestCronAcrossDST pins what the cron library does where a local time happens twice or never:
// 02:30 does not exist in New York on the day clocks go forward and is skipped that day; 01:30
// happens twice on the day they go back and fires twice, an hour apart.
func TestCronAcrossDST(t *testing.T) {
	t.Parallel()
	ny, _ := time.LoadLocation("America/New_York")
	for _, c := range []struct {
		cron string
		from time.Time
		want []string // local times
	}{
		{"30 2 * * *", time.Date(2026, 3, 7, 0, 0, 0, 0, ny), []string{"03-07 02:30 EST", "03-09 02:30 EDT"}},
		{"30 1 * * *", time.Date(2026, 10, 31, 0, 0, 0, 0, ny), []string{"10-31 01:30 EDT", "11-01 01:30 EDT", "11-01 01:30 EST", "11-02 01:30 EST"}},
		{"0 * * * *", time.Date(2026, 11, 1, 0, 30, 0, 0, ny), []string{"11-01 01:00 EDT", "11-01 01:00 EST", "11-01 02:00 EST"}},
	} {
		sched, r := actors.ParseCron(c.cron, "America/New_York")
		if r != nil {
			t.Fatal(r)
		}
		tick := c.from
		for _, want := range c.want {
			tick = sched.Next(tick)
			if got := tick.In(ny).Format("01-02 15:04 MST"); got != want {
				t.Fatalf("%s after %s: %s, want %s", c.cron, c.from, got, want)
			}
		}
	}
	// A schedule fires each of those ticks once: the decided tick is an instant, not a local time.
	f := setup(t, nil)
	f.w.Clock = time.Date(2026, 11, 1, 0, 59, 0, 0, ny)
	spec := scheduleSpec("0 * * * *")
	spec.Timezone = "America/New_York"
	n := len(f.w.Log)
	f.mustCreateSchedule(spec)
	f.w.Advance(2*time.Hour + 2*time.Minute)
	fired, _ := f.decisions(n)
	if len(fired) != 3 || fired[1].Tick.Sub(fired[0].Tick) != time.Hour {
		t.Fatalf("fired %v", fired)
	}
}

// TestEveryCountsFromTheAnchor: an @every schedule's ticks are its creation time (to the
// second) plus multiples of its interval, after a restart across missed ticks too.
func TestEveryCountsFromTheAnchor(t *testing.T) {
	t.Parallel()
	f := setup(t, nil)
	f.w.Clock = f.w.Clock.Add(1500 * time.Millisecond) // 14:05:01.5
	spec := scheduleSpec("@every 90s")
	spec.CatchUp = eventlog.CatchUpOne
	n := len(f.w.Log)
	id := f.mustCreateSchedule(spec)
	f.w.Advance(200 * time.Second) // 14:06:31 and 14:08:01
	f.w.Clock = f.w.Clock.Add(10 * time.Minute)
	f.restartTenant() // 14:09:31 .. 14:17:01 were missed: 14:17:01 fires late
	fired, skipped := f.decisions(n)
	var got []string
	for _, e := range fired {
		got = append(got, e.Tick.Format("15:04:05"))
	}
	if len(got) != 3 || got[0] != "14:06:31" || got[1] != "14:08:01" || got[2] != "14:17:01" || !fired[2].Late ||
		len(skipped) != 1 || skipped[0].From.Format("15:04:05") != "14:09:31" || skipped[0].To.Format("15:04:05") != "14:15:31" {
		t.Fatalf("fired %v, skipped %+v", got, skipped)
	}
	c, _ := f.w.Set.Schedule(id)
	if next := actors.NextTick(c, f.w.Clock); next.Format("15:04:05") != "14:18:31" {
		t.Fatalf("next tick %s", next)
	}
}

// TestSkipsCountEachMissedTick: a server down for weeks across a change of clocks skips each
// missed tick once in its count, as many as the cron has between them, in every zone.
func TestSkipsCountEachMissedTick(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cron, zone string }{
		{"* * * * *", "Europe/Paris"},
		{"*/7 1-3 * * *", "America/New_York"},
		{"30 2 * * 1-5", "America/New_York"},
		{"0,30 * 1,15 * 0", "Australia/Lord_Howe"}, // its clocks move by half an hour
		{"@hourly", "UTC"},
		{"@every 7m", "UTC"},
	} {
		f := setup(t, nil)
		f.w.Clock = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		spec := scheduleSpec(c.cron)
		spec.Timezone, spec.CatchUp = c.zone, eventlog.CatchUpNone
		n := len(f.w.Log)
		id := f.mustCreateSchedule(spec)
		f.w.Clock = f.w.Clock.Add(50 * 24 * time.Hour) // across the spring clock change in Europe and America
		f.restartTenant()
		_, skipped := f.decisions(n)
		if len(skipped) != 1 {
			t.Fatalf("%s in %s: skipped %+v", c.cron, c.zone, skipped)
		}
		sched, _ := actors.ParseCron(c.cron, c.zone)
		want := 0
		for tick := skipped[0].From; !tick.After(skipped[0].To); tick = sched.Next(tick) {
			want++
		}
		if s, _ := f.w.Set.Schedule(id); skipped[0].Ticks != want || s.Skipped[eventlog.SkippedTickMissed] != want {
			t.Errorf("%s in %s: %s..%s counted %d ticks (the schedule %v); the cron has %d", c.cron, c.zone,
				skipped[0].From, skipped[0].To, skipped[0].Ticks, s.Skipped, want)
		}
	}
}
