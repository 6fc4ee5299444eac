package eventlog

import (
	"slices"

	"github.com/tetherhq/tether/eventlog/fastjson"
)

// appendPayload writes the data of the events every job has (submitted, leased, succeeded)
// without reflection, byte for byte what json.Marshal writes: every job's lease and end go
// through it, and encoding/json was a twentieth of the server's CPU in a burn-down. It reports
// false for any other type and for any value only encoding/json writes right (fastjson.Writer's
// contract: a character it would escape, a raw value it would compact, a time it refuses), and
// NewEvent then asks encoding/json. FuzzEncodeMatchesMarshal holds it to json.Marshal, and
// TestEveryFieldEncodes fails on a field of these events that has no line here.
func appendPayload(dst []byte, p Payload) ([]byte, bool) {
	// Each case sizes dst first, so that the event costs one allocation.
	var w fastjson.Writer
	switch e := p.(type) {
	case JobSubmitted:
		w = fastjson.NewWriter(slices.Grow(dst, 256+len(e.Payload)+32*len(e.Labels)))
		w.Str("job_id", e.JobID, true)
		w.Str("tenant", e.Tenant, true)
		w.Str("queue", e.Queue, true)
		w.Str("type", e.Type, true)
		w.Raw("payload", e.Payload, true)
		w.Int("priority", e.Priority, true)
		w.StringMap("labels", e.Labels)
		w.Int("max_attempts", e.MaxAttempts, true)
		w.Int64("lease_ttl_ms", e.LeaseTTLMillis, true)
		w.Str("idempotency_key", e.IdempotencyKey, false)
		w.Str("request_hash", e.RequestHash, false)
		w.Str("reservation_id", e.ReservationID, false)
		w.Str("api_key_id", e.APIKeyID, false)
		w.Int64("result_ttl_ms", e.ResultTTLMillis, false)
		w.Str("flow_id", e.FlowID, false)
		w.Str("flow_step", e.FlowStep, false)
		w.Str("schedule_id", e.ScheduleID, false)
		w.Str("concurrency_key", e.ConcurrencyKey, false)
		WriteRateLimits(&w, e.RateLimits)
		w.Str("traceparent", e.Traceparent, false)
	case JobLeased:
		w = fastjson.NewWriter(slices.Grow(dst, 320))
		w.Str("job_id", e.JobID, true)
		w.Str("lease_id", e.LeaseID, true)
		w.Str("worker_id", e.WorkerID, true)
		w.Str("session_id", e.SessionID, false)
		w.Str("nonce", e.Nonce, true)
		w.Int("attempt", e.Attempt, true)
		w.Time("expires_at", e.ExpiresAt)
		if len(e.RateGrants) > 0 {
			w.Array("rate_grants", len(e.RateGrants), func(w *fastjson.Writer, i int) {
				w.Str("name", e.RateGrants[i].Name, true)
				w.Str("key", e.RateGrants[i].Key, false)
				w.Time("full_at", e.RateGrants[i].FullAt)
			})
		}
	case JobSucceeded:
		w = fastjson.NewWriter(slices.Grow(dst, 256+len(e.Output)+len(e.Signature)))
		w.Str("job_id", e.JobID, true)
		w.Str("lease_id", e.LeaseID, true)
		w.Int("attempt", e.Attempt, true)
		w.Raw("output", e.Output, true)
		w.Str("output_hash", e.OutputHash, true)
		w.Str("signature", e.Signature, false)
	default:
		return nil, false
	}
	return w.Close()
}

// WriteRateLimits writes a job's rate limits as json.Marshal does (omitempty).
func WriteRateLimits(w *fastjson.Writer, uses []RateLimitUse) {
	if len(uses) == 0 {
		return
	}
	w.Array("rate_limits", len(uses), func(w *fastjson.Writer, i int) {
		w.Str("name", uses[i].Name, true)
		w.Str("key", uses[i].Key, false)
	})
}
