package projections

import (
	"math"
	"time"
)

// FullAt is when a bucket of the limit is full again, whose own instant (none: zero) is full:
// a bucket the tenant has not used since the limit's last change is full at FullFrom.
func (l RateLimit) FullAt(full time.Time) time.Time {
	if l.FullFrom.After(full) {
		return l.FullFrom
	}
	return full
}

// ChangedTo is the limit l becomes at at: FullFrom is where a bucket full under l (or at its
// FullFrom) stands under the new limit, so that a bigger burst grants no burst of its own.
func (l RateLimit) ChangedTo(to RateLimit, at time.Time) RateLimit {
	if floor, ok := ConvertBucket(l.FullAt(at), at, l, to); ok {
		to.FullFrom = floor
	}
	return to
}

// RateInterval is the time between two tokens of a rate limit of rate tokens a second, in
// whole nanoseconds: the dispatcher's buckets and the projections' count in it alike.
func RateInterval(rate float64) time.Duration {
	return max(time.Duration(math.Round(float64(time.Second)/rate)), 1)
}

// ConvertBucket carries a bucket across a change of its limit at at: it keeps the tokens it
// holds (up to the new burst; a full one holds the old burst) and gains them at the new rate
// from there. A bucket is the instant it is full again; ok is false when it is full under the
// new limit at at (it is then forgotten). The dispatcher and the fold of tenant.rate_limit_set
// both call it, at the instant the event records, so a restart finds the bucket the
// dispatcher had.
func ConvertBucket(full, at time.Time, from, to RateLimit) (time.Time, bool) {
	owed := 0.0 // tokens short of full
	if full.After(at) {
		owed = float64(full.Sub(at)) / float64(RateInterval(from.Rate))
	}
	tokens := float64(from.Burst) - owed
	short := min(max(float64(to.Burst)-tokens, 0), float64(to.Burst))
	if short == 0 {
		return time.Time{}, false
	}
	return at.Add(time.Duration(math.Round(short * float64(RateInterval(to.Rate))))), true
}
