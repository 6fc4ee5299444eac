package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable writes the result as the table tether bench ends with: throughput, the latency
// percentiles of both measures, and what group commit achieved.
func (r Result) WriteTable(w io.Writer) error {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	burnDown := r.InsertPerSecond > 0
	if !burnDown {
		fmt.Fprintf(w, "%s run: %d jobs, %d producers, %d workers, %.2f s\n\n", r.Mode, r.Jobs, r.Producers, r.Workers, r.Elapsed.Seconds())
	} else {
		workers := fmt.Sprintf("%d workers of capacity %d", r.Workers, r.Capacity)
		if r.Database != nil {
			workers = fmt.Sprintf("one client working %d jobs at once", r.Capacity)
		}
		fmt.Fprintf(w, "%s run: %d jobs in batches of %d, %d producers, %s, drained in %.2f s\n", r.Mode, r.Jobs, r.Batch, r.Producers, workers, r.Elapsed.Seconds())
		if d := r.Database; d != nil {
			fmt.Fprintf(w, "PostgreSQL %s, fsync %s, synchronous_commit %s\n", d.Version, d.Fsync, d.SynchronousCommit)
		}
		fmt.Fprintln(w)
	}
	if r.RateLimit > 0 {
		fmt.Fprintf(w, "every job takes a token of a rate limit of %v a second\n", r.RateLimit)
	}
	if r.ConcurrencyKeys > 0 {
		fmt.Fprintf(w, "jobs spread over %d concurrency keys, max_running_per_key %d (0: unlimited)\n\n", r.ConcurrencyKeys, r.MaxRunningPerKey)
	}
	summary := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if burnDown {
		drain := "from the first connect until every completion was acknowledged"
		if r.Database != nil {
			drain = "from the client's start until it reported every completion committed"
		}
		fmt.Fprintf(summary, "insert\t%.0f jobs/s\t(%.2f s, before any worker connected)\n", r.InsertPerSecond, r.Insert.Seconds())
		fmt.Fprintf(summary, "burn-down\t%.0f jobs/s\t(%s)\n", r.JobsPerSecond, drain)
	} else {
		fmt.Fprintf(summary, "throughput\t%.0f jobs/s\t(until every completion was acknowledged)\n", r.JobsPerSecond)
	}
	us := func(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
	switch {
	case r.Database != nil:
		fmt.Fprintf(summary, "CPU per job\t%s\t(PostgreSQL, if on this machine; River's client and workers %s; user + system)\n", us(r.ServerCPUPerJob), us(r.GeneratorCPUPerJob))
	case !r.ServerMetrics:
		fmt.Fprintf(summary, "events per fsync\tn/a\t(the server's /metrics needs --metrics-token)\n")
		if r.GeneratorCPUPerJob > 0 {
			fmt.Fprintf(summary, "CPU per job\tn/a\t(server; the generator %s; user + system)\n", us(r.GeneratorCPUPerJob))
		}
	default:
		fmt.Fprintf(summary, "events per fsync\t%.1f\t(%.0f events, %.0f fsyncs)\n", r.EventsPerFsync, r.Events, r.Fsyncs)
		if r.ServerCPUPerJob > 0 || r.GeneratorCPUPerJob > 0 {
			fmt.Fprintf(summary, "CPU per job\t%s\t(server; the generator %s; user + system)\n", us(r.ServerCPUPerJob), us(r.GeneratorCPUPerJob))
		}
	}
	fmt.Fprintf(summary, "errors\t%d\t\n", r.Errors)
	if err := summary.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	latency := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(latency, "latency\tp50\tp90\tp99\tmax\t\n")
	type row struct {
		name string
		l    Latency
	}
	rows := []row{{"submit (durable answer)", r.Submit}, {"submit → start", r.SubmitToStart}}
	if burnDown { // the jobs wait for the workers by design
		rows = []row{{"batch submit (durable answer)", r.Submit}}
	}
	for _, row := range rows {
		fmt.Fprintf(latency, "%s\t%s\t%s\t%s\t%s\t\n", row.name, ms(row.l.P50), ms(row.l.P90), ms(row.l.P99), ms(row.l.Max))
	}
	if h := r.History; h != nil {
		for _, read := range h.Reads {
			fmt.Fprintf(latency, "GET %s\t%s\t%s\t%s\t%s\t\n", read.Path, ms(read.Latency.P50), ms(read.Latency.P90), ms(read.Latency.P99), ms(read.Latency.Max))
		}
	}
	if err := latency.Flush(); err != nil {
		return err
	}
	if h := r.History; h != nil && h.ServerRSS > 0 {
		mib := func(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }
		fmt.Fprintf(w, "\nthe server now: %.0f finished jobs retained, %s resident, a %s log\n", h.Retained, mib(h.ServerRSS), mib(h.LogBytes))
	}
	return nil
}

// ProgressBar draws a run's progress on one terminal line, redrawn in place:
//
//	[##########··········]  52%  10400/20000 jobs  4180 jobs/s  eta 2s
type ProgressBar struct {
	W     io.Writer
	Now   func() time.Time // time.Now if nil
	Width int              // cells of the bar; 30 if 0
	began time.Time
	drawn bool
}

// Update redraws the bar for done of total jobs. Its signature fits Config.Progress.
func (p *ProgressBar) Update(done, total int) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	t := now()
	if p.began.IsZero() {
		p.began = t
	}
	width := p.Width
	if width == 0 {
		width = 30
	}
	share := 0.0
	if total > 0 {
		share = min(1, float64(done)/float64(total))
	}
	filled := int(share * float64(width))
	line := fmt.Sprintf("[%s%s] %3.0f%%  %d/%d jobs", strings.Repeat("#", filled), strings.Repeat("·", width-filled), share*100, done, total)
	if elapsed := t.Sub(p.began).Seconds(); elapsed > 0 && done > 0 {
		rate := float64(done) / elapsed
		line += fmt.Sprintf("  %.0f jobs/s", rate)
		if done < total {
			line += fmt.Sprintf("  eta %s", time.Duration(float64(total-done)/rate*float64(time.Second)).Round(time.Second))
		}
	}
	// \r returns to the line's start, \x1b[K clears what a longer earlier line left.
	fmt.Fprintf(p.W, "\r%s\x1b[K", line)
	p.drawn = true
}

// Done clears the bar's line, so what is printed next starts clean.
func (p *ProgressBar) Done() {
	if p.drawn {
		fmt.Fprint(p.W, "\r\x1b[K")
	}
}
