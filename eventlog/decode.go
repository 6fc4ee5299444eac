package eventlog

import "github.com/tetherhq/tether/eventlog/fastjson"

// scanPayload decodes the events every job has (submitted, leased, succeeded, expired) without
// reflection: they are most of any log, and a replay decodes each one. It reports false for
// any other type, and for anything in the data that encoding/json might read differently
// (fastjson's contract: an unknown or differently cased key, an escape, a null, a number out of
// range), which Decode then hands to encoding/json. TestEveryFieldDecodes fails on a field of
// these events that has no case here.
func scanPayload(typ string, data []byte) (Payload, bool) {
	s := fastjson.Scanner{B: data}
	switch typ {
	case "job.submitted":
		var e JobSubmitted
		ok := s.Object(true, func(key []byte) bool {
			switch string(key) {
			case "job_id":
				return s.String(&e.JobID)
			case "tenant":
				return s.String(&e.Tenant)
			case "queue":
				return s.String(&e.Queue)
			case "type":
				return s.String(&e.Type)
			case "payload":
				return s.Raw(&e.Payload)
			case "priority":
				return s.Int(&e.Priority)
			case "labels":
				if e.Labels == nil && s.Null() {
					return true
				}
				return s.StringMap(&e.Labels)
			case "max_attempts":
				return s.Int(&e.MaxAttempts)
			case "lease_ttl_ms":
				return int64Into(&s, &e.LeaseTTLMillis)
			case "idempotency_key":
				return s.String(&e.IdempotencyKey)
			case "request_hash":
				return s.String(&e.RequestHash)
			case "reservation_id":
				return s.String(&e.ReservationID)
			case "api_key_id":
				return s.String(&e.APIKeyID)
			case "result_ttl_ms":
				return int64Into(&s, &e.ResultTTLMillis)
			case "flow_id":
				return s.String(&e.FlowID)
			case "flow_step":
				return s.String(&e.FlowStep)
			case "schedule_id":
				return s.String(&e.ScheduleID)
			case "concurrency_key":
				return s.String(&e.ConcurrencyKey)
			case "rate_limits":
				return ScanRateLimits(&s, &e.RateLimits)
			case "traceparent":
				return s.String(&e.Traceparent)
			}
			return false
		})
		return e, ok
	case "job.leased":
		var e JobLeased
		ok := s.Object(true, func(key []byte) bool {
			switch string(key) {
			case "job_id":
				return s.String(&e.JobID)
			case "lease_id":
				return s.String(&e.LeaseID)
			case "worker_id":
				return s.String(&e.WorkerID)
			case "session_id":
				return s.String(&e.SessionID)
			case "nonce":
				return s.String(&e.Nonce)
			case "attempt":
				return s.Int(&e.Attempt)
			case "expires_at":
				return s.TimeValue(&e.ExpiresAt)
			case "rate_grants":
				e.RateGrants = []RateGrant{}
				return s.Array(func() bool {
					e.RateGrants = append(e.RateGrants, RateGrant{})
					g := &e.RateGrants[len(e.RateGrants)-1]
					return s.Object(false, func(k []byte) bool {
						switch string(k) {
						case "name":
							return s.String(&g.Name)
						case "key":
							return s.String(&g.Key)
						case "full_at":
							return s.TimeValue(&g.FullAt)
						}
						return false
					})
				})
			}
			return false
		})
		return e, ok
	case "job.succeeded":
		var e JobSucceeded
		ok := s.Object(true, func(key []byte) bool {
			switch string(key) {
			case "job_id":
				return s.String(&e.JobID)
			case "lease_id":
				return s.String(&e.LeaseID)
			case "attempt":
				return s.Int(&e.Attempt)
			case "output":
				return s.Raw(&e.Output)
			case "output_hash":
				return s.String(&e.OutputHash)
			case "signature":
				return s.String(&e.Signature)
			}
			return false
		})
		return e, ok
	case "job.expired":
		var e JobExpired
		ok := s.Object(true, func(key []byte) bool {
			switch string(key) {
			case "job_id":
				return s.String(&e.JobID)
			case "reason":
				return s.String(&e.Reason)
			case "api_key_id":
				return s.String(&e.APIKeyID)
			}
			return false
		})
		return e, ok
	}
	return nil, false
}

func int64Into(s *fastjson.Scanner, dst *int64) bool {
	v, ok := s.Int64()
	*dst = v
	return ok
}

// ScanRateLimits reads a job's rate limits as encoding/json does; it reports false on a null,
// which is left to encoding/json.
func ScanRateLimits(s *fastjson.Scanner, dst *[]RateLimitUse) bool {
	*dst = []RateLimitUse{}
	return s.Array(func() bool {
		*dst = append(*dst, RateLimitUse{})
		p := &(*dst)[len(*dst)-1]
		return s.Object(false, func(k []byte) bool {
			switch string(k) {
			case "name":
				return s.String(&p.Name)
			case "key":
				return s.String(&p.Key)
			}
			return false
		})
	})
}
