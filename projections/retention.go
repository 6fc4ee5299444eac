package projections

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// Retention is how long finished jobs stay queryable: the server's policy (--retain,
// --retain-dead, --max-dead). It is not in the log, so a server restarted with another policy
// applies it to the history it has. A zero duration keeps such jobs until they are deleted.
type Retention struct {
	// Done is how long a succeeded or cancelled job stays, unless it has a result TTL of its own.
	Done time.Duration
	// Dead is how long a dead letter stays, and MaxDead how many one tenant keeps (0: no cap);
	// past the cap, its oldest dead letters go first. A result TTL does not apply to a dead
	// letter: dead letters are kept for an operator to look at and re-drive.
	Dead    time.Duration
	MaxDead int
}

// Until reports when a finished job leaves the views, or false if it stays (a live job, or a
// policy that keeps it).
func (r Retention) Until(j *Job) (time.Time, bool) {
	if !j.Status.Terminal() {
		return time.Time{}, false
	}
	d := r.Done
	switch {
	case j.Status == StatusFailed:
		d = r.Dead
	case j.ResultTTL > 0:
		d = j.ResultTTL
	}
	if d <= 0 {
		return time.Time{}, false
	}
	return j.FinishedAt.Add(d), true
}

// Expired reports whether a job's retention has ended at now: the API no longer shows it, even
// before the dispatcher's sweep writes its job.expired.
func (r Retention) Expired(j *Job, now time.Time) bool {
	until, ok := r.Until(j)
	return ok && !now.Before(until)
}

// Expiry is a finished job due to leave the views, why, and since when.
type Expiry struct {
	JobID  string
	Reason string // eventlog.ExpiredRetention or eventlog.ExpiredDeadCap
	At     time.Time
}

// Expirable returns up to limit finished jobs that are due to expire at now under r, soonest
// due first: those whose retention ended, and each tenant's oldest dead letters past r.MaxDead.
// It walks the retention keys in memory and in the table in order of when they are due, so it
// costs in proportion to what it returns (and the number of tenants with dead letters).
func (s *Set) Expirable(r Retention, now time.Time, limit int) []Expiry {
	var out []Expiry
	if r.Done > 0 {
		for _, rest := range s.scanMerged(index{kind: keyDone}, "", false, limit, dueBy(now, r.Done)) {
			out = append(out, Expiry{JobID: rest[8:], Reason: eventlog.ExpiredRetention, At: keyTime(rest).Add(r.Done)})
		}
	}
	for _, rest := range s.scanMerged(index{kind: keyTTL}, "", false, limit, dueBy(now, 0)) {
		out = append(out, Expiry{JobID: rest[8:], Reason: eventlog.ExpiredRetention, At: keyTime(rest)})
	}
	for tenant, dead := range s.deadByTenant() {
		over := 0
		if r.MaxDead > 0 {
			over = dead - r.MaxDead
		}
		// The first `over` of the merged order are among the first `over` of each side, and
		// past them only the dead letters due by age, which come first, can go.
		aged := dueBy(now, r.Dead)
		keep := func(rest string, taken int) verdict {
			if taken < over || r.Dead > 0 && aged(rest, taken) == take {
				return take
			}
			return stop
		}
		for _, rest := range s.scanMerged(deadIndex(tenant), "", false, limit, keep) {
			at := keyTime(rest)
			if over > 0 {
				over--
				out = append(out, Expiry{JobID: rest[8:], Reason: eventlog.ExpiredDeadCap, At: at})
				continue
			}
			if r.Dead <= 0 || now.Before(at.Add(r.Dead)) {
				break
			}
			out = append(out, Expiry{JobID: rest[8:], Reason: eventlog.ExpiredRetention, At: at.Add(r.Dead)})
		}
	}
	slices.SortFunc(out, func(a, b Expiry) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.JobID, b.JobID)) })
	return out[:min(len(out), limit)]
}

// dueBy takes the timed keys due at now after d, and stops at the first that is not.
func dueBy(now time.Time, d time.Duration) func(string, int) verdict {
	return func(rest string, _ int) verdict {
		if now.Before(keyTime(rest).Add(d)) {
			return stop
		}
		return take
	}
}

// deadByTenant counts each tenant's dead letters.
func (s *Set) deadByTenant() map[string]int {
	out := map[string]int{}
	for k, n := range s.deadBy {
		tenant, _, _ := strings.Cut(k, "\x00")
		out[tenant] += n
	}
	return out
}

// first returns the first entry of x, in memory or the table, or false.
func (s *Set) first(x index) (string, bool) {
	rest := s.scanMerged(x, "", false, 1, takeAll)
	if len(rest) == 0 {
		return "", false
	}
	return rest[0], true
}

// NextExpiry is when the next finished job is due to expire under r, or false if none is.
func (s *Set) NextExpiry(r Retention) (time.Time, bool) {
	var next time.Time
	found := false
	consider := func(t time.Time) {
		if !found || t.Before(next) {
			next, found = t, true
		}
	}
	if rest, ok := s.first(index{kind: keyDone}); ok && r.Done > 0 {
		consider(keyTime(rest).Add(r.Done))
	}
	if rest, ok := s.first(index{kind: keyTTL}); ok {
		consider(keyTime(rest))
	}
	for tenant, dead := range s.deadByTenant() {
		rest, ok := s.first(deadIndex(tenant))
		if !ok {
			continue
		}
		switch at := keyTime(rest); {
		case r.MaxDead > 0 && dead > r.MaxDead:
			consider(at)
		case r.Dead > 0:
			consider(at.Add(r.Dead))
		}
	}
	return next, found
}

// RetainedCount is the number of finished jobs the views hold.
func (s *Set) RetainedCount() int {
	n := 0
	for _, c := range s.finished {
		n += c
	}
	return n
}

// DeadBefore returns up to limit of a tenant's dead letters that died before before, oldest
// first, those of queue only if it is set, and whether more match.
func (s *Set) DeadBefore(tenant, queue string, before time.Time, limit int) (ids []string, more bool) {
	rests := s.scanMerged(deadIndex(tenant), "", false, limit+1, func(rest string, _ int) verdict {
		switch {
		case !keyTime(rest).Before(before):
			return stop
		case queue == "" || s.lookup(rest[8:]).Queue == queue:
			return take
		}
		return skip
	})
	for _, rest := range rests {
		ids = append(ids, rest[8:])
	}
	if len(ids) > limit {
		return ids[:limit], true
	}
	return ids, false
}
