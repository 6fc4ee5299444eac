package cli

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// Schedule runs tether schedule SUBCOMMAND: create, get, ls, pause, resume, delete.
func Schedule(args []string) error {
	pause := func(c *client.Client, ctx context.Context, id string) (*wire.Schedule, error) {
		return c.PauseSchedule(ctx, id, true)
	}
	resume := func(c *client.Client, ctx context.Context, id string) (*wire.Schedule, error) {
		return c.PauseSchedule(ctx, id, false)
	}
	return Subcommands("schedule", []Command{
		{"create", "create a schedule: create --name N --cron EXPR [--timezone TZ] --queue Q --type T ...", scheduleCreate},
		{"get", "show a schedule", byID("schedule get", "tether schedule get SCHEDULE_ID|NAME", byIDOrName((*client.Client).Schedule), showSchedule)},
		{"ls", "list the schedules, by name", scheduleList},
		{"pause", "pause a schedule: its ticks pass unfired", byID("schedule pause", "tether schedule pause SCHEDULE_ID|NAME", byIDOrName(pause), showSchedule)},
		{"resume", "resume a schedule: it fires at its ticks from now on", byID("schedule resume", "tether schedule resume SCHEDULE_ID|NAME", byIDOrName(resume), showSchedule)},
		{"delete", "delete a schedule (the jobs it fired stay)", byID("schedule delete", "tether schedule delete SCHEDULE_ID|NAME", byIDOrName((*client.Client).DeleteSchedule),
			func(d *wire.Deleted) string { return fmt.Sprintf("schedule %s deleted\n", d.ID) })},
	}, args)
}

// byIDOrName makes a call on a schedule's id take its name too, which is unique in the tenant.
// An id wins over a name that happens to be spelled the same; what is neither goes to the server
// as it was given, which answers SCHEDULE_NOT_FOUND.
func byIDOrName[T any](call func(*client.Client, context.Context, string) (T, error)) func(*client.Client, context.Context, string) (T, error) {
	return func(c *client.Client, ctx context.Context, ref string) (T, error) {
		list, err := c.Schedules(ctx)
		if err != nil {
			var none T
			return none, err
		}
		id := ref
		for _, s := range list.Schedules {
			if s.ID == ref {
				return call(c, ctx, ref)
			}
			if s.Name == ref {
				id = s.ID
			}
		}
		return call(c, ctx, id)
	}
}

func scheduleCreate(args []string) error {
	fs := flag.NewFlagSet("schedule create", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	name := fs.String("name", "", "the schedule's name, unique in the tenant (creating it again with the same definition is a no-op)")
	cron := fs.String("cron", "", `five fields "min hour day month weekday", or @hourly, @daily, @weekly, @monthly, @every 90s`)
	timezone := fs.String("timezone", "UTC", "the IANA time zone the cron is read in, e.g. Europe/Paris")
	overlap := fs.String("overlap", "skip", "skip: no firing while the last one's job is live; allow: fire anyway")
	catchUp := fs.String("catch-up", "one", "ticks missed while the server was down: one fires once for the newest; none skips them")
	job := jobFlags(fs)
	if _, err := ParseArgs(fs, args, 0, `tether schedule create --name N --cron "0 3 * * *" --queue Q --type T`); err != nil {
		return err
	}
	if *name == "" || *cron == "" {
		return BadFlagf(fs, "--name and --cron are required")
	}
	req, err := job()
	if err != nil {
		return err
	}
	s, err := cf.Client().CreateSchedule(context.Background(), wire.ScheduleRequest{Name: *name, Cron: *cron, Timezone: *timezone,
		Job: req, Overlap: *overlap, CatchUp: *catchUp})
	if err != nil {
		return err
	}
	return cf.Print(s, func() string { return showSchedule(s) })
}

// showSchedule prints a schedule.
func showSchedule(s *wire.Schedule) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
	status := s.Status
	if s.IdempotentHit != nil && *s.IdempotentHit {
		status += " (it existed with this definition)"
	}
	row("schedule", s.ID+"  "+s.Name+"  "+status)
	row("cron", fmt.Sprintf("%s  (%s)", s.Cron, s.Timezone))
	row("job", fmt.Sprintf("queue %s, type %s, max_attempts %d, payload %s", s.Job.Queue, s.Job.Type, s.Job.MaxAttempts, orDash(string(s.Job.Payload))))
	if s.Job.ConcurrencyKey != "" {
		row("concurrency key", s.Job.ConcurrencyKey)
	}
	for _, u := range s.Job.RateLimits {
		row("rate limit", rateLimitText(u))
	}
	row("policy", "overlap "+s.Overlap+", catch_up "+s.CatchUp)
	row("next", timeOrDash(s.NextFireAt))
	row("last tick", timeOrDash(s.LastTick))
	if s.LastFire != nil {
		row("last fire", s.LastFire.JobID+" at "+s.LastFire.FiredAt.Format(time.RFC3339))
	}
	row("fired", fmt.Sprint(s.Fired))
	if len(s.Skipped) > 0 {
		var parts []string
		for _, reason := range slices.Sorted(maps.Keys(s.Skipped)) {
			parts = append(parts, fmt.Sprintf("%s %d", reason, s.Skipped[reason]))
		}
		row("skipped", strings.Join(parts, ", "))
	}
	if s.Receipt != nil {
		row("receipt", fmt.Sprintf("seq=%d hash=%s", s.Receipt.Seq, s.Receipt.Hash))
	}
	_ = w.Flush()
	return b.String()
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func scheduleList(args []string) error {
	fs := flag.NewFlagSet("schedule ls", flag.ContinueOnError)
	var cf ClientFlags
	cf.Register(fs, apiKeyHelp)
	if _, err := ParseArgs(fs, args, 0, "tether schedule ls"); err != nil {
		return err
	}
	list, err := cf.Client().Schedules(context.Background())
	if err != nil {
		return err
	}
	return cf.Print(list, func() string {
		var b strings.Builder
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tNAME\tCRON\tTIMEZONE\tSTATUS\tNEXT\tFIRED")
		for _, s := range list.Schedules {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", s.ID, s.Name, s.Cron, s.Timezone, s.Status, timeOrDash(s.NextFireAt), s.Fired)
		}
		_ = w.Flush()
		return b.String()
	})
}
