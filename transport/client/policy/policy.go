package policy

import (
	"iter"
	"net/http"
	"time"

	"github.com/tetherhq/tether/transport/wire"
)

const (
	// LeaseTTLDefault is a lease's TTL when its assignment does not say (the server's default).
	LeaseTTLDefault = 30 * time.Second
	// ResendMin and ResendMax bound the Backoff before a result is sent again.
	ResendMin = 200 * time.Millisecond
	ResendMax = 10 * time.Second
)

// Retryable reports whether a request the server refused with code (and HTTP status) may
// succeed later unchanged, with backoff: the code's Retry in the table of codes, or, for a code
// that is not tether's (a proxy's answer), a 5xx or 429 status.
func Retryable(code string, status int) bool {
	if c, ok := wire.LookupCode(code); ok {
		return c.Retry
	}
	return status >= 500 || status == http.StatusTooManyRequests
}

// Answer is what came of one send of a result.
type Answer struct {
	// NoAnswer is set when none came: the connection went away, the request timed out.
	NoAnswer bool
	// Code is the server's refusal, "" when it took the result; Status its HTTP status, which
	// matters for a code that is not tether's.
	Code   string
	Status int
}

// MayPass reports whether the result may be taken if sent again.
func (a Answer) MayPass() bool { return a.NoAnswer || a.Code != "" && Retryable(a.Code, a.Status) }

// Step is what to do with a result after a send.
type Step int

const (
	// Forget: the server took it or refused it for good; remove it from disk and end the job.
	Forget Step = iota
	// SendAgain: send the very same result again after Backoff(Decision.Tries, ResendMin,
	// ResendMax, ...).
	SendAgain
	// SendFailure: the completion was refused for what it is; keep and send Decision.Failure's
	// failure instead.
	SendFailure
	// GiveUp: its lease surely expired and its one more send failed too; forget it, saying so
	// (RESULT_DROPPED).
	GiveUp
)

// Refusal is the failure that replaces a completion the server refused for good.
type Refusal struct {
	Code      string // the failure's error_code
	Retryable bool
}

// Decision is the step after a send, with what it needs.
type Decision struct {
	Step    Step
	Tries   int     // SendAgain: the sends again so far, this one included (Backoff's n)
	Failure Refusal // SendFailure
}

// Sends is what a worker tracks of one kept result's sends; the zero value is a result not yet
// sent. One result's sends are made one at a time.
type Sends struct {
	tries int
	// last is set once a send was made after the lease may have expired: the one more send.
	last bool
}

// After decides what follows a send of a result of frame type kind that came to a: now is the
// worker's clock, validUntil is MayBeValid of its lease.
func (s *Sends) After(a Answer, kind string, now, validUntil time.Time) Decision {
	if a.MayPass() {
		if s.last {
			return Decision{Step: GiveUp}
		}
		s.last = now.After(validUntil)
		s.tries++
		return Decision{Step: SendAgain, Tries: s.tries}
	}
	if kind == wire.FrameComplete && !a.NoAnswer {
		if r, ok := refusalOf(a.Code); ok {
			return Decision{Step: SendFailure, Failure: r}
		}
	}
	return Decision{Step: Forget}
}

// refusalOf is the failure to report for a completion refused with code, if the refusal is
// for what the completion is.
func refusalOf(code string) (Refusal, bool) {
	switch code {
	case "PAYLOAD_TOO_LARGE":
		return Refusal{Code: "output_too_large"}, true
	case "INVALID_ARGUMENT", wire.CodeInvalidJSON:
		return Refusal{Code: "output_refused"}, true
	case "SIGNATURE_INVALID":
		// The worker's key, not the job, is at fault: another worker may run it.
		return Refusal{Code: "signature_invalid", Retryable: true}, true
	}
	return Refusal{}, false
}

// Backoff is the delay before attempt n (from 1): exponential from lo, capped at hi, with jitter
// over its upper half so that many workers do not come back in step. jitter(m) returns a
// duration in [0, m], drawn from the caller's randomness.
func Backoff(n int, lo, hi time.Duration, jitter func(time.Duration) time.Duration) time.Duration {
	d := hi
	if n < 30 {
		d = min(hi, lo<<(n-1))
	}
	return d/2 + jitter(d/2)
}

// LeaseTTL is how long a lease lasts past each heartbeat the server answers, as the worker
// reckons it when the assignment arrives at now: until the lease_expires_at it carries, or
// LeaseTTLDefault when it carries none (or one already past, by the worker's clock).
func LeaseTTL(expiresAt *time.Time, now time.Time) time.Duration {
	if expiresAt != nil && expiresAt.After(now) {
		return expiresAt.Sub(now)
	}
	return LeaseTTLDefault
}

// MayBeValid is until when a lease may still be valid, as far as the worker knows: the server
// last confirmed it at heard, and a server that restarts gives every lease one more TTL.
func MayBeValid(heard time.Time, ttl time.Duration) time.Time { return heard.Add(2 * ttl) }

// HeartbeatEvery is the heartbeat interval the leases held need: the shortest each assignment
// asked for (0: none asked), and base otherwise.
func HeartbeatEvery(base time.Duration, needs iter.Seq[time.Duration]) time.Duration {
	every := base
	for d := range needs {
		if d > 0 {
			every = min(every, d)
		}
	}
	return every
}
