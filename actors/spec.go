package actors

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// JobSpec is one job as a client submits it.
type JobSpec struct {
	Queue    string          `json:"queue"`
	Type     string          `json:"type"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Priority int             `json:"priority,omitempty"`
	// Delay and RunAt postpone the first lease; at most one may be set.
	Delay          time.Duration     `json:"delay,omitempty"`
	RunAt          time.Time         `json:"run_at,omitzero"`
	MaxAttempts    int               `json:"max_attempts,omitempty"` // 0: DefaultMaxAttempts
	LeaseTTL       time.Duration     `json:"lease_ttl,omitempty"`    // 0: DefaultLeaseTTL
	Labels         map[string]string `json:"labels,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	ReservationID  string            `json:"reservation_id,omitempty"`
	// ResultTTL, if set, is how long the job stays queryable once it succeeded or was
	// cancelled, instead of the server's retention (projections.Retention).
	ResultTTL time.Duration `json:"result_ttl,omitempty"`
	// ConcurrencyKey, if set, caps the job's leases with every other job of its tenant that
	// has the key, at its queue's max_running_per_key (or the tenant's).
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// RateLimits names the tenant's rate limits each lease of the job takes a token from
	// (SetRateLimit): at most RateLimitsPerJobMax, each named once per key.
	RateLimits []eventlog.RateLimitUse `json:"rate_limits,omitempty"`
}

// Limits and defaults of intake. Names put the qualifier last (leaseTTLMax), as the rest of
// the code does.
const (
	DefaultPayloadBytesMax = 1 << 20
	QueueLenMax            = 64
	TypeLenMax             = 128
	PriorityMin            = -100
	PriorityMax            = 100
	MaxAttemptsMax         = 100
	DefaultMaxAttempts     = 5
	LeaseTTLMin            = 5 * time.Second
	LeaseTTLMax            = time.Hour
	DefaultLeaseTTL        = 30 * time.Second
	DelayMax               = 366 * 24 * time.Hour
	ResultTTLMin           = time.Second
	ResultTTLMax           = 366 * 24 * time.Hour
	LabelsMax              = 32
	LabelKeyLenMax         = 64
	LabelValueLenMax       = 256
	IdempotencyKeyLenMax   = 256
	ConcurrencyKeyLenMax   = 128
	// MaxRunningPerKeyMax bounds a key limit: past the capacity of any worker fleet it would
	// mean unlimited, which 0 says.
	MaxRunningPerKeyMax = 1_000_000
	// Rate limits: a tenant's, and those one job takes tokens from. A rate is tokens a second;
	// RateMin is one token a day, so a bucket's interval fits the dispatcher's clock exactly.
	RateLimitNameLenMax   = 64
	RateLimitsMax         = 1000
	RateLimitsPerJobMax   = 8
	RateMin               = 1.0 / 86400
	RateMax               = 1_000_000
	BurstMax              = 1_000_000
	BatchJobsMax          = 1000
	ReservationTTLDefault = 300 * time.Second
	ReservationTTLMax     = 24 * time.Hour
	ReservationsMax       = 10_000 // active reservations per tenant
	ProgressDataBytesMax  = 64 << 10
	OutputBytesMax        = 1 << 20
	ErrorMessageLenMax    = 4096
	EventTypeLenMax       = 64
)

// Limits that an operator may change.
type Limits struct {
	PayloadBytesMax int // of one job's payload; 0: DefaultPayloadBytesMax
}

func (l Limits) payloadBytesMax() int {
	if l.PayloadBytesMax <= 0 {
		return DefaultPayloadBytesMax
	}
	return l.PayloadBytesMax
}

// normalize validates a spec and fills its defaults. The error names the field.
func (s *JobSpec) normalize(l Limits) *Rejection {
	switch {
	case !validName(s.Queue, QueueLenMax, false):
		return reject(CodeInvalidArgument, "queue %q must be 1..%d of [A-Za-z0-9_-]", clip(s.Queue), QueueLenMax)
	case !validName(s.Type, TypeLenMax, true):
		return reject(CodeInvalidArgument, "type %q must be 1..%d of [A-Za-z0-9_.:/-]", clip(s.Type), TypeLenMax)
	case len(s.Payload) > l.payloadBytesMax():
		return reject(CodePayloadTooLarge, "payload is %d bytes; the limit is %d", len(s.Payload), l.payloadBytesMax())
	case s.Priority < PriorityMin || s.Priority > PriorityMax:
		return reject(CodeInvalidArgument, "priority %d is outside %d..%d", s.Priority, PriorityMin, PriorityMax)
	case s.MaxAttempts < 0 || s.MaxAttempts > MaxAttemptsMax:
		return reject(CodeInvalidArgument, "max_attempts %d is outside 1..%d", s.MaxAttempts, MaxAttemptsMax)
	case s.LeaseTTL != 0 && (s.LeaseTTL < LeaseTTLMin || s.LeaseTTL > LeaseTTLMax):
		return reject(CodeInvalidArgument, "lease_ttl %s is outside %s..%s", s.LeaseTTL, LeaseTTLMin, LeaseTTLMax)
	case s.ResultTTL != 0 && (s.ResultTTL < ResultTTLMin || s.ResultTTL > ResultTTLMax):
		return reject(CodeInvalidArgument, "result_ttl %s is outside %s..%s", s.ResultTTL, ResultTTLMin, ResultTTLMax)
	case s.Delay < 0 || s.Delay > DelayMax:
		return reject(CodeInvalidArgument, "delay %s is outside 0..%s", s.Delay, DelayMax)
	case s.Delay != 0 && !s.RunAt.IsZero():
		return reject(CodeInvalidArgument, "give delay or run_at, not both")
	case len(s.IdempotencyKey) > IdempotencyKeyLenMax:
		return reject(CodeInvalidArgument, "idempotency key is %d bytes; the limit is %d", len(s.IdempotencyKey), IdempotencyKeyLenMax)
	case len(s.ReservationID) > 64:
		return reject(CodeInvalidArgument, "reservation_id is too long")
	case len(s.ConcurrencyKey) > ConcurrencyKeyLenMax:
		return reject(CodeInvalidArgument, "concurrency_key is %d bytes; the limit is %d", len(s.ConcurrencyKey), ConcurrencyKeyLenMax)
	case !validKey(s.ConcurrencyKey):
		return reject(CodeInvalidArgument, "concurrency_key must be UTF-8 without control characters")
	}
	if r := checkLabels(s.Labels); r != nil {
		return r
	}
	if r := checkRateLimitUses(s.RateLimits); r != nil {
		return r
	}
	if len(bytes.TrimSpace(s.Payload)) == 0 {
		s.Payload = json.RawMessage("null")
	}
	if !json.Valid(s.Payload) {
		return reject(CodeInvalidArgument, "payload is not valid JSON")
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if s.LeaseTTL == 0 {
		s.LeaseTTL = DefaultLeaseTTL
	}
	return nil
}

func checkLabels(labels map[string]string) *Rejection {
	if len(labels) > LabelsMax {
		return reject(CodeInvalidArgument, "%d labels; the limit is %d", len(labels), LabelsMax)
	}
	bad, found := "", false // the first bad key in order, so the same label is named every time
	for k, v := range labels {
		if (!validName(k, LabelKeyLenMax, true) || len(v) > LabelValueLenMax) && (!found || k < bad) {
			bad, found = k, true
		}
	}
	if found {
		return reject(CodeInvalidArgument, "label %q must be 1..%d of [A-Za-z0-9_.:/-] with a value of at most %d bytes", clip(bad), LabelKeyLenMax, LabelValueLenMax)
	}
	return nil
}

// TenantLenMax bounds a tenant's name, which is part of stream names in the log.
const TenantLenMax = 64

// ValidTenant reports whether name can name a tenant: 1..64 of [A-Za-z0-9_.-].
func ValidTenant(name string) bool {
	return validName(strings.ReplaceAll(name, ".", "_"), TenantLenMax, false)
}

// template is the job a normalized spec defines, for a flow's step or a schedule to submit
// later.
func (s *JobSpec) template() eventlog.JobTemplate {
	return eventlog.JobTemplate{Queue: s.Queue, Type: s.Type, Payload: s.Payload, Priority: s.Priority, MaxAttempts: s.MaxAttempts,
		LeaseTTLMillis: s.LeaseTTL.Milliseconds(), Labels: s.Labels, ResultTTLMillis: s.ResultTTL.Milliseconds(),
		ConcurrencyKey: s.ConcurrencyKey, RateLimits: s.RateLimits}
}

// checkRateLimitUses refuses a job's rate limits that are malformed: too many, a bad name or
// key, or one bucket named twice (the job would take two of its tokens).
func checkRateLimitUses(uses []eventlog.RateLimitUse) *Rejection {
	if len(uses) > RateLimitsPerJobMax {
		return reject(CodeInvalidArgument, "%d rate_limits; a job takes at most %d", len(uses), RateLimitsPerJobMax)
	}
	for i, u := range uses {
		switch {
		case !validName(u.Name, RateLimitNameLenMax, false):
			return reject(CodeInvalidArgument, "rate limit name %q must be 1..%d of [A-Za-z0-9_-]", clip(u.Name), RateLimitNameLenMax)
		case len(u.Key) > ConcurrencyKeyLenMax || !validKey(u.Key):
			return reject(CodeInvalidArgument, "rate limit %s: key must be at most %d bytes of UTF-8 without control characters", u.Name, ConcurrencyKeyLenMax)
		case slices.Contains(uses[:i], u):
			return reject(CodeInvalidArgument, "rate limit %s is named twice with key %q", u.Name, u.Key)
		}
	}
	return nil
}

// undefinedRateLimit refuses rate limits the tenant has not defined: a name misspelt would
// otherwise limit nothing. A limit deleted later lifts itself from the jobs that name it.
func undefinedRateLimit(env Env, tenant string, uses []eventlog.RateLimitUse) *Rejection {
	if len(uses) == 0 {
		return nil
	}
	var missing string
	env.Read(func(s *projections.Set) {
		for _, u := range uses {
			if _, ok := s.RateLimit(tenant, u.Name); !ok && missing == "" {
				missing = u.Name
			}
		}
	})
	if missing == "" {
		return nil
	}
	r := reject(CodeRateLimitNotFound, "tenant %s has no rate limit %q; set it first (PUT /v1/rate-limits/%s)", tenant, missing, missing)
	r.Details = map[string]any{"rate_limit": missing}
	return r
}

// validKey reports whether s can be a concurrency key: UTF-8 without control characters. A
// key is a customer's id, a token's name, a GPU model: anything printable.
func validKey(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// requestHash identifies a submit for idempotency: equal specs, whitespace in the payload
// aside, hash equal.
func (s *JobSpec) requestHash() string {
	c := *s
	c.IdempotencyKey = ""
	if p, err := signing.Canonical(s.Payload); err == nil {
		c.Payload = p
	}
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// validName reports whether s has 1..max bytes of [A-Za-z0-9_-], plus [.:/] when dotted.
func validName(s string, max int, dotted bool) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		case dotted && (c == '.' || c == ':' || c == '/'):
		default:
			return false
		}
	}
	return true
}

// clip shortens a rejected value before it is echoed in a message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
