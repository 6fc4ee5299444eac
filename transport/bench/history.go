package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// History is what a server holding a history costs, measured after a fill (Config.History):
// the latency of the reads a dashboard and clients make, one at a time, and the server's size.
type History struct {
	// Retained is the finished jobs the server's views hold (tether_jobs_retained); the
	// server's figures are zero when its /metrics could not be read.
	Retained  float64 `json:"retained_jobs"`
	ServerRSS float64 `json:"server_rss_bytes"`
	LogBytes  float64 `json:"log_bytes"`
	Reads     []Read  `json:"reads"`
}

// Read is the latency of one kind of request, asked readRepeats times in a row.
type Read struct {
	Path    string  `json:"path"`
	Latency Latency `json:"latency"`
}

// readRepeats is how often each read is timed, after readWarmups untimed.
const (
	readRepeats = 200
	readWarmups = 10
)

// measureHistory times the reads of a server that holds the run's jobs (of queue) and more.
func measureHistory(ctx context.Context, hc *http.Client, cfg Config, queue string) (*History, error) {
	h := &History{}
	q := url.QueryEscape(queue)
	for _, path := range []string{
		"/v1/jobs?limit=50",
		"/v1/jobs?limit=50&order=newest",
		"/v1/jobs?limit=50&status=succeeded",
		"/v1/jobs?limit=50&status=queued", // none: the worst case for a scan
		"/v1/jobs?limit=50&queue=" + q,
		"/v1/jobs?limit=50&type=noop&order=newest",
		"/v1/queues",
	} {
		ds := make([]time.Duration, 0, readRepeats)
		for i := range readWarmups + readRepeats {
			began := time.Now()
			if err := cfg.bounded(ctx, "GET", path, func(ctx context.Context) error { return get(ctx, hc, cfg.Server+path, cfg.Token) }); err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
			if i >= readWarmups {
				ds = append(ds, time.Since(began))
			}
		}
		h.Reads = append(h.Reads, Read{Path: path, Latency: latencyOf(ds)})
	}
	m, err := scrape(ctx, hc, cfg)
	if err != nil {
		return nil, err
	}
	h.Retained, h.ServerRSS, h.LogBytes = m["tether_jobs_retained"], m["process_resident_memory_bytes"], m["tether_log_size_bytes"]
	return h, nil
}
