package report

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/audit"
)

// Verify says what replay verify checked of a log, and what it found.
func Verify(sum audit.Summary) string {
	var b strings.Builder
	switch {
	case sum.Runs == nil:
		fmt.Fprintf(&b, "verified   %s records; chain, index and projections hold\n", thousands(sum.Records))
	default:
		fmt.Fprintf(&b, "checked    %s records in %d runs between the records that are not here\n", thousands(sum.Records), len(sum.Runs))
		for _, p := range sum.Problems {
			fmt.Fprintf(&b, "FAILED     %s\n", p)
		}
		for _, r := range sum.Runs {
			seqs := fmt.Sprintf("seqs %d..%d", r.First, r.Last)
			if r.Last < r.First {
				seqs = fmt.Sprintf("from seq %d", r.First) // it failed at its first record
			}
			switch {
			case r.First == 1:
				fmt.Fprintf(&b, "run        %s, from the genesis hash: ", seqs)
			case r.First == sum.AnchorSeq+1:
				fmt.Fprintf(&b, "run        %s, the hot log, from the anchor's hash %s: ", seqs, r.Anchor)
			default:
				fmt.Fprintf(&b, "run        %s, from seq %d's hash %s as its first segment states: ", seqs, r.First-1, r.Anchor)
			}
			if r.Error != "" {
				fmt.Fprintf(&b, "FAILED: %s\n", r.Error)
			} else {
				fmt.Fprintln(&b, "the chain holds")
			}
		}
		for _, g := range sum.Gaps {
			what := "MISSING   "
			if g.Pruned {
				what = "pruned    "
			}
			fmt.Fprintf(&b, "%s records %d..%d are not here: %s\n", what, g.First, g.Last, g.Why)
		}
		fmt.Fprintf(&b, "NOT CHECKED %s\n", sum.Unchecked)
	}
	if sum.AnchorSeq > 0 {
		fmt.Fprintf(&b, "archive    seqs 1..%d in segments (%d here), the hot log from seq %d\n", sum.AnchorSeq, sum.Segments, sum.AnchorSeq+1)
	}
	fmt.Fprintf(&b, "streams    %s in the hot log\n", thousands(sum.Streams))
	fmt.Fprintf(&b, "head       seq %d  hash %s\n", sum.HeadSeq, sum.HeadHash)
	if sum.Records > 0 {
		fmt.Fprintf(&b, "time span  %s .. %s (%s)\n", stampOf(sum.FirstTime), stampOf(sum.LastTime), sum.LastTime.Sub(sum.FirstTime).Round(time.Millisecond))
	}
	if sum.Jobs != nil {
		fmt.Fprintf(&b, "jobs       %s\n", statusLine(sum.Jobs))
	}
	fmt.Fprintf(&b, "events     %s\n", countsLine(sum.Types))
	switch {
	case sum.CheckpointSeq > 0:
		fmt.Fprintf(&b, "checkpoint seq %d equals the replay up to it\n", sum.CheckpointSeq)
	case sum.CheckpointSkipped != "":
		fmt.Fprintf(&b, "checkpoint not compared: %s\n", sum.CheckpointSkipped)
	case sum.Runs != nil:
	default:
		fmt.Fprintln(&b, "checkpoint none stored")
	}
	return b.String()
}

// Segments says what replay verify --archive checked of archive segments alone.
func Segments(sum eventlog.ArchiveSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "verified   %d segments, seqs %d..%d (%s records, %s bytes); each whole, and the chain across them holds\n",
		sum.Segments, sum.First, sum.Last, thousands(sum.Last-sum.First+1), thousands(uint64(sum.Bytes)))
	if sum.First == 1 {
		fmt.Fprintln(&b, "anchor     the genesis hash")
	} else {
		fmt.Fprintf(&b, "anchor     %s (seq %d's hash: check it against the segment before, a receipt or the log)\n", sum.Anchor, sum.First-1)
	}
	fmt.Fprintf(&b, "end        seq %d  hash %s\n", sum.Last, sum.End)
	return b.String()
}

// Export says what replay verify --export checked of an export file.
func Export(sum audit.ExportSummary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "verified   %s records, seqs %d..%d; the chain holds\n", thousands(sum.Records), sum.FirstSeq, sum.LastSeq)
	if sum.FromGenesis {
		fmt.Fprintln(&b, "anchor     the genesis hash")
	} else {
		fmt.Fprintf(&b, "anchor     %s (the file's word for seq %d's hash: check it against the log or a receipt)\n", sum.Anchor, sum.FirstSeq-1)
	}
	fmt.Fprintf(&b, "head       seq %d  hash %s\n", sum.LastSeq, sum.HeadHash)
	return b.String()
}

// Gaps writes to w a line for each run of records a history of id cannot show, and returns how
// many of them are missing (not pruned on purpose).
func Gaps(w io.Writer, id string, gaps []audit.Gap) (holes int) {
	for _, g := range gaps {
		what := "pruned: "
		if !g.Pruned {
			what, holes = "MISSING: ", holes+1
		}
		fmt.Fprintf(w, "%srecords %d..%d are not here (%s); events of %s among them are not shown\n", what, g.First, g.Last, g.Why, id)
	}
	return holes
}

// History lists the events of id; verify says whether the chain through the last of them was
// verified, from verified (seq 0: from genesis), with verifyErr.
func History(id string, entries []audit.Entry, verify bool, verified eventlog.Head, verifyErr error) string {
	last := entries[len(entries)-1].Seq
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d events\n", id, len(entries))
	for _, e := range entries {
		number := "#" + strconv.Itoa(e.Number)
		if e.Number == 0 {
			number = "#?" // records of it before this one are not here
		}
		fmt.Fprintf(&b, "%8d  %s  %-4s %-22s %s\n", e.Seq, stampOf(e.Time), number, e.Type, e.Text)
	}
	switch {
	case !verify:
	case verified.Seq == 0 && verifyErr == nil:
		fmt.Fprintf(&b, "the chain from genesis through seq %d verifies; seq %d's hash is %s\n", last, last, entries[len(entries)-1].Hash)
	case verifyErr == nil || errors.Is(verifyErr, audit.ErrGaps):
		fmt.Fprintf(&b, "the chain from seq %d's hash %s (the oldest here without a gap) through seq %d verifies; seq %d's hash is %s\n",
			verified.Seq, verified.Hash, last, last, entries[len(entries)-1].Hash)
	}
	return b.String()
}

// State shows the projections as they stood after a seq.
func State(st audit.State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "state after seq %d (%s)  hash %s\n", st.Seq, stampOf(st.Time), st.Hash)
	fmt.Fprintf(&b, "jobs      %s\n", statusLine(st.Jobs))
	for _, t := range st.Tenants {
		fmt.Fprintf(&b, "\ntenant %s: active %d/%s, running %d/%s, reservations %d\n", t.Name,
			t.Active, limitText(t.MaxActive), t.Running, limitText(t.MaxRunning), t.Reservations)
		for _, q := range t.Queues {
			fmt.Fprintf(&b, "  queue %-20s depth %d  scheduled %d  leased %d  dead %d  oldest %s\n",
				q.Queue, q.Depth, q.Scheduled, q.Leased, q.Dead, q.OldestAge.Round(time.Millisecond))
		}
	}
	fmt.Fprintf(&b, "\nleases    %d\n", len(st.Leases))
	for _, l := range st.Leases {
		fmt.Fprintf(&b, "  job %s  lease %s  worker %s  attempt %d  expires %s\n", l.JobID, l.LeaseID, l.WorkerID, l.Attempt, stampOf(l.ExpiresAt))
	}
	fmt.Fprintf(&b, "workers   %d\n", len(st.Workers))
	for _, w := range st.Workers {
		fmt.Fprintf(&b, "  %s  %-8s %-10s tenant %s  queues %s  capacity %d  running %d\n",
			w.ID, w.Status, w.Transport, w.Tenant, strings.Join(w.Queues, ","), w.Capacity, len(w.InFlight))
	}
	fmt.Fprintf(&b, "flows     %s\n", orderedCounts(st.Flows, projections.FlowRunning, projections.FlowSucceeded, projections.FlowFailed, projections.FlowCancelled))
	for _, f := range st.LiveFlows {
		fmt.Fprintf(&b, "  flow %s  tenant %s  %s  %s  steps %s\n", f.ID, f.Tenant, f.Name, f.Status, countsLine(f.Steps))
	}
	fmt.Fprintf(&b, "schedules %d\n", len(st.Schedules))
	for _, c := range st.Schedules {
		status, lastTick := "active", "-"
		if c.Paused {
			status = "paused"
		}
		if !c.LastTick.IsZero() {
			lastTick = stampOf(c.LastTick)
		}
		fmt.Fprintf(&b, "  %s  tenant %s  %s  %s (%s)  %s  fired %d  skipped %s  last tick %s\n",
			c.ID, c.Tenant, c.Name, c.Cron, c.Timezone, status, c.Fired, orDash(countsLine(c.Skipped)), lastTick)
	}
	return b.String()
}

func limitText(n int) string {
	if n == 0 {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

// Receipt says that a receipt is confirmed: r is its record, start the oldest head the chain
// through it was verified from (seq 0: genesis).
func Receipt(r eventlog.Record, start eventlog.Head) string {
	if start.Seq > 0 {
		return fmt.Sprintf("confirmed  seq %d is %s in %s at %s, and the chain through it verifies from seq %d's hash %s, the oldest here (the records before were deleted on purpose)\n",
			r.Seq, r.Type, r.Stream, stampOf(r.Time), start.Seq, start.Hash)
	}
	return fmt.Sprintf("confirmed  seq %d is %s in %s at %s, and the chain from genesis through it verifies\n",
		r.Seq, r.Type, r.Stream, stampOf(r.Time))
}

// Progress draws "verify: 120,000 / 1,000,000 records (12%)" on f when it is a
// terminal, at most ten times a second, and clears it at the end.
func Progress(f *os.File, what string) (audit.ProgressFunc, func()) {
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil, func() {}
	}
	var last time.Time
	drawn := false
	return func(done, total uint64) {
			if now := time.Now(); now.Sub(last) >= 100*time.Millisecond || done == total {
				last, drawn = now, true
				pct := 100.0
				if total > 0 {
					pct = 100 * float64(done) / float64(total)
				}
				fmt.Fprintf(f, "\r%s: %s / %s records (%.0f%%)  ", what, thousands(done), thousands(total), pct)
			}
		}, func() {
			if drawn {
				fmt.Fprint(f, "\r\033[K")
			}
		}
}

// Failed explains an audit failure with the seq it names.
func Failed(err error) error {
	if seq := audit.BadSeq(err); seq > 0 {
		return fmt.Errorf("FAILED at seq %d: %w", seq, err)
	}
	return fmt.Errorf("FAILED: %w", err)
}

func stampOf(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// statusLine lists job counts in lifecycle order.
func statusLine(jobs map[projections.Status]int) string {
	return orderedCounts(jobs, projections.StatusQueued, projections.StatusScheduled, projections.StatusLeased,
		projections.StatusSucceeded, projections.StatusFailed, projections.StatusCancelled)
}

// orderedCounts lists counts in the order given, zeros too.
func orderedCounts[S ~string](counts map[S]int, order ...S) string {
	parts := make([]string, 0, len(order))
	for _, s := range order {
		parts = append(parts, fmt.Sprintf("%s %d", s, counts[s]))
	}
	return strings.Join(parts, ", ")
}

// countsLine lists counts by name.
func countsLine[N int | uint64](m map[string]N) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d", n, m[n]))
	}
	return strings.Join(parts, ", ")
}

// thousands writes n with commas: 1,000,000.
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// orDash is s, or "-" for nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
