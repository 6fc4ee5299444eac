package transport

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"net/http"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/internal/proc"
)

// waitingReasons are the reasons tether_jobs_waiting counts a waiting job under.
var waitingReasons = []string{actors.ExplainScheduled, actors.ExplainRetryBackoff, actors.ExplainQueuePaused, actors.ExplainTenantQuota,
	actors.ExplainKeyLimit, actors.ExplainRateLimited, actors.ExplainNoWorker, actors.ExplainWorkersBusy, actors.ExplainBehind}

// serveMetrics writes the Prometheus text exposition (format 0.0.4) of the projections and the
// log. Every value is read under one lock of the projections, so the figures agree.
// processStart is when this process started, as near as a package can tell: a client that
// reads /metrics twice tells a restart by it.
var processStart = time.Now()

func (s *Server) serveMetrics(r *request) error {
	var e exposition
	now := s.clock()
	var tenants []string                // every tenant with an event
	queueNames := map[string][]string{} // each one's queues, as /v1/queues lists them
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
			{"tether_lease_released_total", "Leases given back untried (undelivered, unacknowledged after a restart, a worker stopping, a command that could not start), by queue.", func(c projections.Counters) uint64 { return c.Released }},
			{"tether_jobs_dead_lettered_total", "Jobs dead-lettered, by queue.", func(c projections.Counters) uint64 { return c.DeadLettered }},
			{"tether_jobs_cancelled_total", "Jobs cancelled, by queue.", func(c projections.Counters) uint64 { return c.Cancelled }},
			{"tether_jobs_expired_total", "Finished jobs that left every view (retention ended, deleted, purged, over the dead-letter cap), by queue.", func(c projections.Counters) uint64 { return c.Expired }},
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
			{"tether_queue_paused", "1 while the queue is paused: it takes submits and assigns nothing.", func(q projections.QueueStats) float64 {
				return float64(btoi(!q.PausedSince.IsZero()))
			}},
		}
		stats := map[string][]projections.QueueStats{}
		tenants = set.TenantNames()
		for _, t := range tenants {
			stats[t] = set.Queues(t, now)
			for _, q := range stats[t] {
				queueNames[t] = append(queueNames[t], q.Queue)
			}
		}
		for _, g := range gauges {
			e.family(g.name, "gauge", g.help)
			for _, t := range tenants {
				for _, q := range stats[t] {
					e.sample(g.name, g.value(q), "tenant", t, "queue", q.Queue)
				}
			}
		}
		e.family("tether_assign_latency_seconds", "histogram", "Wait of first attempts from ready (submitted, or run_at) to leased, by queue.")
		for _, q := range queues {
			e.histogram("tether_assign_latency_seconds", assignLatency(counters[q].AssignLatency), "queue", q)
		}
		dead := 0
		for _, t := range tenants {
			for _, q := range stats[t] {
				dead += q.Dead
			}
		}
		e.family("tether_dlq_size", "gauge", "Dead-lettered jobs waiting for a re-drive, all queues.")
		e.sample("tether_dlq_size", float64(dead))
		e.family("tether_jobs_retained", "gauge", "Finished jobs the views keep until their retention ends.")
		e.sample("tether_jobs_retained", float64(set.RetainedCount()))
		e.family("tether_jobs_in_memory", "gauge", "Jobs the views hold in memory: the live ones and those finished since the last checkpoint; the other finished jobs are in the table on disk.")
		e.sample("tether_jobs_in_memory", float64(set.InMemory()))
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
	if t := s.cfg.Tracing; t != nil {
		spans, eventsDropped := t.Counts()
		e.scalars([]scalar{
			{"tether_trace_spans_ended_total", "counter", "Spans the server made to export (--otel-endpoint): each is exported, failed, dropped or queued.", float64(spans.Ended)},
			{"tether_trace_spans_exported_total", "counter", "Spans the collector took.", float64(spans.Exported)},
			{"tether_trace_spans_export_failed_total", "counter", "Spans in exports that failed or timed out (a collector down, refusing, too slow).", float64(spans.Failed)},
			{"tether_trace_spans_dropped_total", "counter", "Spans dropped unexported: the export queue (OTEL_BSP_MAX_QUEUE_SIZE) was full, the collector too slow or away.", float64(spans.Dropped)},
			{"tether_trace_spans_queued", "gauge", "Spans waiting to be exported, in the queue or the export under way.", float64(spans.Queued)},
			{"tether_trace_events_dropped_total", "counter", "Committed events whose spans were not made: more ended than the tracer could keep up with.", float64(eventsDropped)},
		})
	}
	st, head := r.b.LogStats(), r.b.Head()
	e.family("tether_log_events_total", "counter", "Events made durable by this process.")
	e.sample("tether_log_events_total", float64(st.Events))
	e.family("tether_log_head_seq", "gauge", "Seq of the newest durable event.")
	e.sample("tether_log_head_seq", float64(head.Seq))
	for _, h := range []struct {
		name, help string
		h          eventlog.Histogram
	}{
		{"tether_log_append_seconds", "Time from handing events to the log to their being durable (or failed), per append.", st.AppendSeconds},
		{"tether_log_batch_events", "Events per group commit.", st.BatchEvents},
		{"tether_log_fsync_seconds", "fsyncs of the event log's files (WAL, MANIFEST, tables).", st.SyncSeconds},
	} {
		e.family(h.name, "histogram", h.help)
		e.histogram(h.name, h.h)
	}
	e.family("tether_log_size_bytes", "gauge", "Disk space the event log's store takes.")
	e.sample("tether_log_size_bytes", float64(r.b.LogBytes()))
	e.storage(r.b.StorageStats())
	arch := r.b.Archive()
	e.scalars([]scalar{
		{"tether_log_hot_bytes", "gauge", "Disk space (estimated) of the hot log: the records and stream index still in the store.", float64(arch.HotBytes)},
		{"tether_log_oldest_hot_seq", "gauge", "Seq of the oldest record in the hot log; older ones are in archive segments.", float64(arch.OldestHotSeq)},
		{"tether_archive_bytes", "gauge", "Bytes of the sealed archive segments in the archive directory.", float64(arch.ArchiveBytes)},
		{"tether_archive_segments", "gauge", "Sealed archive segments in the archive directory.", float64(arch.Segments)},
		{"tether_archive_sealed_total", "counter", "Archive segments sealed and committed by this process.", float64(arch.Sealed)},
		{"tether_archive_deleted_total", "counter", "Archive segments deleted by this process because they were older than --archive-keep.", float64(arch.Dropped)},
		{"tether_archive_failures_total", "counter", "Archiving steps that failed and left their records in the hot log (or a segment undeleted).", float64(arch.Failed)},
		{"tether_archive_damaged_segments", "gauge", "Archive segments a scrub found damaged (logged ARCHIVE_DAMAGED, named in GET /v1/archive) that are still there: their records do not read until a good copy is put back.", float64(len(arch.Damaged))},
		{"tether_archive_scrubs_total", "counter", "Scrubs by this process that read every archive segment against its checksum (--archive-scrub-every).", float64(arch.ScrubPasses)},
		{"tether_archive_scrubbed_bytes_total", "counter", "Bytes of archive segments the scrubs read (at most --archive-scrub-rate a second).", float64(arch.ScrubbedBytes)},
		{"tether_archive_scrub_last_end_timestamp_seconds", "gauge", "When the last scrub that read every segment ended, Unix seconds; 0: none yet.", unixSeconds(arch.ScrubLastEnd)},
	})
	// Why jobs wait, from the dispatcher (what GET /v1/jobs/{id}/explain says of each), apart
	// from the projections' lock: a moment later than the figures above.
	waiting, err := r.b.WaitingReasons(r.Context())
	if err != nil {
		return err
	}
	// Every reason of every queue /v1/queues lists gets a sample, 0 included, so that a series
	// goes to 0 rather than away.
	e.family("tether_jobs_waiting", "gauge", "Jobs not running, by tenant, queue and the reason GET /v1/jobs/{id}/explain gives (scheduled, retry_backoff, queue_paused, tenant_quota, concurrency_key, rate_limited, no_worker_for_queue, workers_busy, behind_n).")
	type at struct{ tenant, queue, reason string }
	byReason := map[at]int{}
	for _, w := range waiting.Jobs {
		byReason[at{w.Tenant, w.Queue, w.Reason}] = w.Jobs
	}
	for _, t := range tenants {
		for _, q := range queueNames[t] {
			for _, reason := range waitingReasons {
				byReason[at{t, q, reason}] += 0
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(byReason), func(a, b at) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.queue, b.queue), cmp.Compare(a.reason, b.reason))
	}) {
		e.sample("tether_jobs_waiting", float64(byReason[k]), "tenant", k.tenant, "queue", k.queue, "reason", k.reason)
	}
	e.family("tether_concurrency_keys_at_limit", "gauge", "Concurrency keys that hold as many leases as a queue of theirs allows and have jobs waiting there, by tenant.")
	for _, t := range tenants {
		e.sample("tether_concurrency_keys_at_limit", float64(waiting.KeysAtLimit[t]), "tenant", t)
	}
	limits, err := r.b.RateLimits(r.Context(), "")
	if err != nil {
		return err
	}
	e.family("tether_rate_limit_tokens", "gauge", "Tokens in each rate limit's bucket without a key, now (burst when full), by tenant and limit.")
	for _, l := range limits {
		e.sample("tether_rate_limit_tokens", l.Tokens, "tenant", l.Tenant, "limit", l.Name)
	}
	e.family("tether_rate_limit_buckets_below_full", "gauge", "Buckets of each rate limit (one per key jobs name it with) that are not full, by tenant and limit.")
	for _, l := range limits {
		e.sample("tether_rate_limit_buckets_below_full", float64(l.Buckets), "tenant", l.Tenant, "limit", l.Name)
	}
	e.family("tether_rate_limit_rate", "gauge", "Tokens a second each rate limit's buckets gain, by tenant and limit.")
	for _, l := range limits {
		e.sample("tether_rate_limit_rate", l.Rate, "tenant", l.Tenant, "limit", l.Name)
	}
	ckptSeq, ckptCovers := r.b.Checkpoint()
	e.family("tether_checkpoint_seq", "gauge", "Seq up to which the newest projection checkpoint covers the log; 0 before the first.")
	e.sample("tether_checkpoint_seq", float64(ckptSeq))
	e.family("tether_checkpoint_age_seconds", "gauge", "Age of the newest checkpoint's state: now minus the time of the last record it covers. Absent before the first checkpoint.")
	if !ckptCovers.IsZero() {
		e.sample("tether_checkpoint_age_seconds", max(now.Sub(ckptCovers).Seconds(), 0))
	}
	role := "single"
	if s.leading.Load() != nil {
		role = "leader"
	}
	e.role(role)
	e.process()
	r.w.Header().Set("Content-Type", metricsContentType)
	_, err = r.w.Write(e.buf.Bytes())
	return err
}

const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// metricsHandler serves /metrics to callers of kind: the broker's figures once one is
// attached; while the server is a hot standby, its own (serveStandbyMetrics).
func (s *Server) metricsHandler(kind authKind) http.Handler {
	full := s.api(kind, s.serveMetrics)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := s.standby.Load()
		if s.loaded() != nil || p == nil || *p == nil {
			full.ServeHTTP(w, r)
			return
		}
		if _, err := s.authenticate(nil, r, kind); err != nil { // the metrics credential needs no broker
			writeError(w, toAPIError(err))
			return
		}
		s.serveStandbyMetrics(w, r, (*p)())
	})
}

// serveStandbyMetrics is /metrics of a hot standby: that it is one, how far its copy is behind
// the replicated log, and the process. The jobs' figures are the leader's to give.
func (s *Server) serveStandbyMetrics(w http.ResponseWriter, r *http.Request, st Standby) {
	var e exposition
	e.role("standby")
	e.family("tether_standby_head_seq", "gauge", "Seq of the newest record this standby's copy of the replicated log holds.")
	e.sample("tether_standby_head_seq", float64(st.HeadSeq))
	if st.Lag != nil {
		// Asked of the replicated log now; a log that does not answer leaves the series out
		// rather than stalling the scrape or saying 0.
		if lag, err := st.Lag(r.Context()); err == nil {
			e.family("tether_standby_lag_records", "gauge", "Records the replicated log holds that this standby has not copied yet.")
			e.sample("tether_standby_lag_records", float64(lag.Records))
			e.family("tether_standby_lag_seconds", "gauge", "How much older the newest record this standby copied is than the replicated log's newest: 0 when it holds them all.")
			e.sample("tether_standby_lag_seconds", lag.Behind.Seconds())
		} else if ce := s.log.Check(zap.DebugLevel, "a standby's lag is not known: the replicated log did not answer"); ce != nil {
			ce.Write(zap.Error(err))
		}
	}
	e.process()
	w.Header().Set("Content-Type", metricsContentType)
	_, _ = w.Write(e.buf.Bytes())
}

// storage is the tether_pebble_* families: what the log's store wrote beyond the log's own
// records and what it holds, per level where Pebble counts per level.
func (e *exposition) storage(st eventlog.StorageStats) {
	e.scalars([]scalar{
		{"tether_pebble_wal_bytes_in_total", "counter", "Bytes of the batches written to Pebble's WAL.", float64(st.WALBytesIn)},
		{"tether_pebble_wal_bytes_written_total", "counter", "Bytes written to Pebble's WAL files, framing included.", float64(st.WALBytesWritten)},
		{"tether_pebble_flushes_total", "counter", "Memtables Pebble flushed to tables.", float64(st.Flushes)},
		{"tether_pebble_compactions_total", "counter", "Compactions Pebble finished.", float64(st.Compactions)},
		{"tether_pebble_compaction_seconds_total", "counter", "Time Pebble's compactions took, added up.", st.CompactionSeconds},
		{"tether_pebble_ingestions_total", "counter", "Checkpoints' tables Pebble took in, one ingestion a checkpoint.", float64(st.Ingestions)},
		{"tether_pebble_compaction_debt_bytes", "gauge", "Pebble's estimate of the bytes compactions must still write to bring the levels into shape.", float64(st.CompactionDebtBytes)},
		{"tether_pebble_read_amp", "gauge", "Tables a read that finds nothing looks in: L0's sublevels and every other level that holds a table.", float64(st.ReadAmp)},
		{"tether_pebble_blob_files", "gauge", "Blob files holding the values separated from the tables.", float64(st.BlobFiles)},
		{"tether_pebble_blob_bytes", "gauge", "Bytes of those blob files.", float64(st.BlobBytes)},
	})
	for _, m := range []struct {
		name, kind, help string
		v                func(eventlog.LevelStats) float64
	}{
		{"tether_pebble_flush_bytes_total", "counter", "Bytes of tables and blob files flushes wrote, by level: flushes write into L0, so the other levels stay 0 (kept so that every tether_pebble_ series by level has the same labels).", func(l eventlog.LevelStats) float64 { return float64(l.FlushedBytes) }},
		{"tether_pebble_compaction_bytes_written_total", "counter", "Bytes of tables and blob files compactions wrote into each level.", func(l eventlog.LevelStats) float64 { return float64(l.CompactedBytes) }},
		{"tether_pebble_compaction_bytes_read_total", "counter", "Bytes of each level's tables compactions read and rewrote.", func(l eventlog.LevelStats) float64 { return float64(l.ReadBytes) }},
		{"tether_pebble_ingested_bytes_total", "counter", "Bytes of checkpoint tables ingested into each level (the lower, the less is rewritten later).", func(l eventlog.LevelStats) float64 { return float64(l.IngestedBytes) }},
		{"tether_pebble_ingested_tables_total", "counter", "Checkpoint tables ingested into each level.", func(l eventlog.LevelStats) float64 { return float64(l.IngestedTables) }},
		{"tether_pebble_level_tables", "gauge", "Tables each level holds.", func(l eventlog.LevelStats) float64 { return float64(l.Tables) }},
		{"tether_pebble_level_bytes", "gauge", "Bytes of the tables each level holds.", func(l eventlog.LevelStats) float64 { return float64(l.TableBytes) }},
	} {
		e.family(m.name, m.kind, m.help)
		for i, l := range st.Levels {
			e.sample(m.name, m.v(l), "level", strconv.Itoa(i))
		}
	}
}

// role is the tether_role family: 1 for this server's role.
func (e *exposition) role(role string) {
	e.family("tether_role", "gauge", "1 for this server's role: leader or standby of a replicated log, or single (a log of its own).")
	e.sample("tether_role", 1, "role", role)
}

// process is the process's own families.
func (e *exposition) process() {
	if cpu, ok := proc.CPU(); ok {
		e.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
		e.sample("process_cpu_seconds_total", cpu.Seconds())
	}
	e.family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.")
	e.sample("process_start_time_seconds", float64(processStart.UnixNano())/1e9)
	if rss, ok := proc.RSS(); ok {
		e.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
		e.sample("process_resident_memory_bytes", float64(rss))
	}
	var mem goruntime.MemStats
	goruntime.ReadMemStats(&mem)
	e.family("go_goroutines", "gauge", "Number of goroutines that currently exist.")
	e.sample("go_goroutines", float64(goruntime.NumGoroutine()))
	e.family("go_memstats_heap_inuse_bytes", "gauge", "Number of heap bytes that are in use.")
	e.sample("go_memstats_heap_inuse_bytes", float64(mem.HeapInuse))
	e.family("go_memstats_sys_bytes", "gauge", "Number of bytes obtained from system.")
	e.sample("go_memstats_sys_bytes", float64(mem.Sys))
}

// assignLatency turns the projection's histogram (per-bucket counts, integer nanoseconds) into
// the exposition's (cumulative counts, seconds).
func assignLatency(h projections.LatencyHistogram) eventlog.Histogram {
	out := eventlog.Histogram{Bounds: projections.AssignLatencyBounds, Counts: make([]uint64, len(projections.AssignLatencyBounds)),
		Count: h.Count, Sum: float64(h.SumNanos) / 1e9}
	var running uint64
	for i := range out.Counts {
		if i < len(h.Buckets) {
			running += h.Buckets[i]
		}
		out.Counts[i] = running
	}
	return out
}

// exposition builds Prometheus text format.
type exposition struct{ buf bytes.Buffer }

func (e *exposition) family(name, typ, help string) {
	fmt.Fprintf(&e.buf, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// scalar is one family of one sample without labels.
type scalar struct {
	name, kind, help string
	v                float64
}

// scalars writes each as its family and its one sample.
func (e *exposition) scalars(all []scalar) {
	for _, m := range all {
		e.family(m.name, m.kind, m.help)
		e.sample(m.name, m.v)
	}
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

// histogram writes a histogram's buckets, sum and count; the family line is the caller's.
func (e *exposition) histogram(name string, h eventlog.Histogram, labels ...string) {
	for i, b := range h.Bounds {
		e.sample(name+"_bucket", float64(h.Counts[i]), slices.Concat(labels, []string{"le", strconv.FormatFloat(b, 'g', -1, 64)})...)
	}
	e.sample(name+"_bucket", float64(h.Count), slices.Concat(labels, []string{"le", "+Inf"})...)
	e.sample(name+"_sum", h.Sum, labels...)
	e.sample(name+"_count", float64(h.Count), labels...)
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unixSeconds is t as Unix seconds, 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
