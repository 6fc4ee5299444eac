package projections

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// AssignLatencyBounds are the upper bounds, in seconds, of the submit→assign histogram's buckets.
var AssignLatencyBounds = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800}

// LatencyHistogram counts how long first attempts waited between becoming ready (submitted, or
// run_at for a delayed job) and being leased, by the records' own times, so it is a fold like
// every other projection: the same log gives the same histogram, and it survives restarts.
type LatencyHistogram struct {
	// Buckets[i] counts waits at most AssignLatencyBounds[i] (and above the bound before);
	// the last counts those above every bound.
	Buckets  []uint64 `json:"buckets"`
	Count    uint64   `json:"count"`
	SumNanos uint64   `json:"sum_nanos"`
}

func (h *LatencyHistogram) observe(d time.Duration) {
	d = max(d, 0) // a clock that stepped back between the two records
	if h.Buckets == nil {
		h.Buckets = make([]uint64, len(AssignLatencyBounds)+1)
	}
	i, _ := slices.BinarySearch(AssignLatencyBounds, d.Seconds())
	h.Buckets[i]++
	h.Count++
	h.SumNanos += uint64(d)
}

// ThroughputWindow is how many one-minute buckets of throughput a queue keeps.
const ThroughputWindow = 60

// Throughput counts one queue's finished attempts in the last ThroughputWindow minutes of
// record time: a ring indexed by the minute, each slot tagged with the minute it counts.
type Throughput struct {
	Tenant string         `json:"tenant"`
	Queue  string         `json:"queue"`
	Slots  []MinuteCounts `json:"slots"`
}

// MinuteCounts are one minute's finished attempts.
type MinuteCounts struct {
	Minute    int64 `json:"minute"` // Unix time / 60
	Succeeded int   `json:"succeeded"`
	Failed    int   `json:"failed"` // failed attempts, lease expiries included
}

func (t *Throughput) slot(at time.Time) *MinuteCounts {
	if t.Slots == nil {
		t.Slots = make([]MinuteCounts, ThroughputWindow)
	}
	m := at.Unix() / 60
	s := &t.Slots[slotOf(m)]
	if s.Minute != m {
		*s = MinuteCounts{Minute: m}
	}
	return s
}

// activeSince reports whether the queue finished an attempt in a minute after since's.
func (t *Throughput) activeSince(since time.Time) bool {
	m := since.Unix() / 60
	for _, s := range t.Slots {
		if s.Minute > m && s.Succeeded+s.Failed > 0 {
			return true
		}
	}
	return false
}

// PerMinute returns the ThroughputWindow minutes up to and including now's, oldest first.
func (t *Throughput) PerMinute(now time.Time) []MinuteCounts {
	out := make([]MinuteCounts, ThroughputWindow)
	last := now.Unix() / 60
	for i := range out {
		m := last - int64(ThroughputWindow-1-i)
		out[i].Minute = m
		if t != nil && t.Slots != nil {
			if s := t.Slots[slotOf(m)]; s.Minute == m {
				out[i] = s
			}
		}
	}
	return out
}

// slotOf is a minute's place in the ring, for minutes before 1970 too.
func slotOf(minute int64) int64 {
	return (minute%ThroughputWindow + ThroughputWindow) % ThroughputWindow
}

func (s *Set) throughputOf(j *Job) *Throughput {
	t := s.throughput[waitKey(j)]
	if t == nil {
		t = &Throughput{Tenant: j.Tenant, Queue: j.Queue}
		s.throughput[waitKey(j)] = t
	}
	return t
}

// countStats folds a job event into the counters, the assign latency and the throughput; it
// runs before the job's own fold, while j still holds the state the event ends.
func (s *Set) countStats(at time.Time, j *Job, p eventlog.Payload) {
	c := s.counter(j.Queue)
	switch e := p.(type) {
	case eventlog.JobLeased:
		if e.Attempt == 1 && j.LastLeaseID == "" { // a first attempt, not one leased again after a release
			ready := j.CreatedAt
			if j.RunAt.After(ready) {
				ready = j.RunAt
			}
			c.AssignLatency.observe(at.Sub(ready))
		}
	case eventlog.JobSucceeded:
		c.Succeeded++
		s.throughputOf(j).slot(at).Succeeded++
	case eventlog.JobFailed:
		c.Failed++
		s.throughputOf(j).slot(at).Failed++
	case eventlog.JobLeaseExpired:
		c.Failed++
		c.LeaseExpired++
		s.throughputOf(j).slot(at).Failed++
	case eventlog.JobLeaseReleased:
		c.Released++
		if e.AttemptSpent {
			c.Failed++
			s.throughputOf(j).slot(at).Failed++
		}
	case eventlog.JobRetryScheduled:
		c.Retried++
	case eventlog.JobDeadLettered:
		c.DeadLettered++
	case eventlog.JobCancelled:
		c.Cancelled++
	case eventlog.JobSubmitted:
		panic("projections: job.submitted for a job that exists: " + e.JobID)
	}
}

// QueueThroughput returns a tenant's queue's finished attempts per minute up to now.
func (s *Set) QueueThroughput(tenant, queue string, now time.Time) []MinuteCounts {
	return s.throughput[tenant+"\x00"+queue].PerMinute(now)
}

// throughputList is the checkpoint's form of the throughput map: sorted, so equal Sets encode
// equally.
func (s *Set) throughputList() []*Throughput {
	out := make([]*Throughput, 0, len(s.throughput))
	for _, t := range s.throughput {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Throughput) int {
		return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Queue, b.Queue))
	})
	return out
}
