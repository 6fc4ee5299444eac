package transport

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/internal/proc"
)

// serveMetrics writes the Prometheus text exposition (format 0.0.4) of the projections and the
// log. Every value is read under one lock of the projections, so the figures agree.
func (s *Server) serveMetrics(r *request) error {
	var e exposition
	now := s.clock()
	r.b.Read(func(set *projections.Set) {
		counters := set.Counters()
		queues := slices.Sorted(maps.Keys(counters))
		for _, m := range []struct {
			name, help string
			value      func(projections.Counters) uint64
		}{
			{"tether_jobs_submitted_total", "Jobs submitted, by queue.", func(c projections.Counters) uint64 { return c.Submitted }},
			{"tether_jobs_succeeded_total", "Jobs completed successfully, by queue.", func(c projections.Counters) uint64 { return c.Succeeded }},
			{"tether_jobs_failed_total", "Failed attempts (lease expiries included), by queue.", func(c projections.Counters) uint64 { return c.Failed }},
			{"tether_jobs_retried_total", "Retries scheduled, by queue.", func(c projections.Counters) uint64 { return c.Retried }},
			{"tether_lease_expired_total", "Leases that ran out, by queue.", func(c projections.Counters) uint64 { return c.LeaseExpired }},
			{"tether_jobs_dead_lettered_total", "Jobs dead-lettered, by queue.", func(c projections.Counters) uint64 { return c.DeadLettered }},
			{"tether_jobs_cancelled_total", "Jobs cancelled, by queue.", func(c projections.Counters) uint64 { return c.Cancelled }},
		} {
			e.family(m.name, "counter", m.help)
			for _, q := range queues {
				e.sample(m.name, float64(m.value(counters[q])), "queue", q)
			}
		}
		type gauge struct {
			name, help string
			value      func(projections.QueueStats) float64
		}
		gauges := []gauge{
			{"tether_queue_depth", "Ready jobs, by tenant and queue.", func(q projections.QueueStats) float64 { return float64(q.Depth) }},
			{"tether_queue_scheduled", "Jobs waiting for run_at or a retry backoff.", func(q projections.QueueStats) float64 { return float64(q.Scheduled) }},
			{"tether_queue_leased", "Jobs under a lease.", func(q projections.QueueStats) float64 { return float64(q.Leased) }},
			{"tether_queue_dead", "Dead-lettered jobs.", func(q projections.QueueStats) float64 { return float64(q.Dead) }},
			{"tether_queue_oldest_age_seconds", "Age of the oldest ready job.", func(q projections.QueueStats) float64 { return q.OldestAge.Seconds() }},
		}
		stats := map[string][]projections.QueueStats{}
		tenants := set.TenantNames()
		for _, t := range tenants {
			stats[t] = set.Queues(t, now)
		}
		for _, g := range gauges {
			e.family(g.name, "gauge", g.help)
			for _, t := range tenants {
				for _, q := range stats[t] {
					e.sample(g.name, g.value(q), "tenant", t, "queue", q.Queue)
				}
			}
		}
		e.family("tether_leases_active", "gauge", "Valid leases.")
		e.sample("tether_leases_active", float64(len(set.Leases())))
		byTransport := map[string]int{"websocket": 0, "longpoll": 0}
		for _, w := range set.OpenSessions() {
			byTransport[w.Session.Transport]++
		}
		e.family("tether_workers_connected", "gauge", "Workers with an open session, by transport.")
		for _, t := range slices.Sorted(maps.Keys(byTransport)) {
			e.sample("tether_workers_connected", float64(byTransport[t]), "transport", t)
		}
	})
	st, head := r.b.Log().Stats(), r.b.Head()
	e.family("tether_log_events_total", "counter", "Events made durable by this process.")
	e.sample("tether_log_events_total", float64(st.Events))
	e.family("tether_log_fsyncs_total", "counter", "fsyncs of the event log by this process.")
	e.sample("tether_log_fsyncs_total", float64(st.Syncs))
	e.family("tether_log_fsync_seconds_total", "counter", "Time spent in fsyncs of the event log.")
	e.sample("tether_log_fsync_seconds_total", st.SyncTime.Seconds())
	e.family("tether_log_head_seq", "gauge", "Seq of the newest durable event.")
	e.sample("tether_log_head_seq", float64(head.Seq))
	if cpu, ok := proc.CPU(); ok {
		e.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
		e.sample("process_cpu_seconds_total", cpu.Seconds())
	}
	r.w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, err := r.w.Write(e.buf.Bytes())
	return err
}

// exposition builds Prometheus text format.
type exposition struct{ buf bytes.Buffer }

func (e *exposition) family(name, typ, help string) {
	fmt.Fprintf(&e.buf, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// sample writes one sample; labels come in name, value pairs.
func (e *exposition) sample(name string, v float64, labels ...string) {
	e.buf.WriteString(name)
	if len(labels) > 0 {
		e.buf.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			fmt.Fprintf(&e.buf, "%s=%q", labels[i], escapeLabel(labels[i+1]))
		}
		e.buf.WriteByte('}')
	}
	e.buf.WriteByte(' ')
	e.buf.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	e.buf.WriteByte('\n')
}

// escapeLabel replaces what is not printable ASCII, so that %q escapes only backslash and
// double quote, as the exposition format wants. Tenant and queue names never need it.
func escapeLabel(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '_'
		}
		return r
	}, s)
}
