package projections

import (
	"encoding/json"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/fastjson"
)

// encodeJob returns json.Marshal(j), the form of a job in the table: without reflection when
// fastjson can write it byte for byte, which is every job whose strings need no escaping and
// whose payload and output are compact ASCII, and by json.Marshal otherwise. A flush encodes
// every job that finished, so this is on the path of every job.
func encodeJob(j *Job) ([]byte, error) {
	if b, ok := appendJob(nil, j); ok {
		return b, nil
	}
	return json.Marshal(j)
}

// appendJob writes j as json.Marshal does, field by field in the struct's order, or reports
// that it gave up. TestEveryJobFieldIsEncoded fails on a field of Job that this or scanJob
// lacks.
func appendJob(dst []byte, j *Job) ([]byte, bool) {
	w := fastjson.NewWriter(dst)
	w.Str("id", j.ID, true)
	w.Str("tenant", j.Tenant, true)
	w.Str("queue", j.Queue, true)
	w.Str("type", j.Type, true)
	w.Raw("payload", j.Payload, true)
	w.Int("priority", j.Priority, true)
	w.StringMap("labels", j.Labels)
	w.Str("status", string(j.Status), true)
	w.Int("attempt", j.Attempt, true)
	w.Int("max_attempts", j.MaxAttempts, true)
	w.Int("attempt_base", j.AttemptBase, false)
	w.Int64("lease_ttl", int64(j.LeaseTTL), true)
	w.Str("last_lease_id", j.LastLeaseID, false)
	w.Int("releases", j.Releases, false)
	if !j.RunAt.IsZero() {
		w.Time("run_at", j.RunAt)
	}
	if l := j.Lease; l != nil {
		w.Object("lease", func(w *fastjson.Writer) {
			w.Str("lease_id", l.LeaseID, true)
			w.Str("worker_id", l.WorkerID, true)
			w.Str("session_id", l.SessionID, false)
			w.Str("nonce", l.Nonce, true)
			w.Int("attempt", l.Attempt, true)
			w.Time("expires_at", l.ExpiresAt)
		})
	} else {
		w.Null("lease")
	}
	w.Bool("cancel_requested", j.CancelRequested)
	w.Raw("output", j.Output, false)
	w.Str("output_hash", j.OutputHash, false)
	w.Str("succeeded_lease", j.SucceededLease, false)
	if j.SucceededSeq != 0 {
		w.Uint("succeeded_seq", j.SucceededSeq)
	}
	w.Str("succeeded_nonce", j.SucceededNonce, false)
	w.Str("signature", j.Signature, false)
	if e := j.Error; e != nil {
		w.Object("error", func(w *fastjson.Writer) {
			w.Str("code", e.Code, true)
			w.Str("message", e.Message, false)
		})
	} else {
		w.Null("error")
	}
	w.Str("dead_reason", j.DeadReason, false)
	w.Time("created_at", j.CreatedAt)
	w.Time("updated_at", j.UpdatedAt)
	if !j.StartedAt.IsZero() {
		w.Time("started_at", j.StartedAt)
	}
	w.Str("worker_id", j.WorkerID, false)
	if !j.FinishedAt.IsZero() {
		w.Time("finished_at", j.FinishedAt)
	}
	w.Str("idempotency_key", j.IdempotencyKey, false)
	w.Str("request_hash", j.RequestHash, false)
	w.Int64("result_ttl", int64(j.ResultTTL), false)
	w.Str("flow_id", j.FlowID, false)
	w.Str("flow_step", j.FlowStep, false)
	w.Str("schedule_id", j.ScheduleID, false)
	w.Str("concurrency_key", j.ConcurrencyKey, false)
	eventlog.WriteRateLimits(&w, j.RateLimits)
	w.Str("traceparent", j.Traceparent, false)
	w.Uint("submit_seq", j.SubmitSeq)
	w.Uint("last_seq", j.LastSeq)
	w.Int("worker_seq", j.WorkerSeq, false)
	w.Int("worker_seq_event", j.WorkerSeqEvent, false)
	w.Int("events", j.Events, true)
	if len(j.Progress) > 0 {
		w.Array("progress", len(j.Progress), func(w *fastjson.Writer, i int) {
			p := &j.Progress[i]
			w.Int("number", p.Number, true)
			w.Uint("seq", p.Seq)
			w.Time("time", p.Time)
			w.Str("event_type", p.Kind, true)
			w.Raw("data", p.Data, false)
			w.Int("worker_seq", p.WorkerSeq, false)
		})
	}
	w.Bool("events_truncated", j.EventsTruncated)
	return w.Close()
}

// decodeJob reads a job from the table as json.Unmarshal reads it into a fresh Job: without
// reflection for what appendJob writes, and by json.Unmarshal for anything else (a key it does
// not expect, a string with escapes, a key seen twice where encoding/json would merge). An
// expiry and every read of a finished job decode one, so this is on the path of every job too.
func decodeJob(b []byte) (*Job, error) {
	if j, ok := scanJob(b); ok {
		return j, nil
	}
	j := &Job{}
	if err := json.Unmarshal(b, j); err != nil {
		return nil, err
	}
	return j, nil
}

// scanJob reads what appendJob writes, or reports false.
func scanJob(b []byte) (*Job, bool) {
	j := &Job{}
	s := fastjson.Scanner{B: b}
	i64 := func(dst *int64) bool {
		v, ok := s.Int64()
		*dst = v
		return ok
	}
	ok := s.Object(true, func(key []byte) bool {
		switch string(key) {
		case "id":
			return s.String(&j.ID)
		case "tenant":
			return s.String(&j.Tenant)
		case "queue":
			return s.String(&j.Queue)
		case "type":
			return s.String(&j.Type)
		case "payload":
			return s.Raw(&j.Payload)
		case "priority":
			return s.Int(&j.Priority)
		case "labels":
			if j.Labels == nil && s.Null() {
				return true
			}
			return s.StringMap(&j.Labels)
		case "status":
			return s.String((*string)(&j.Status))
		case "attempt":
			return s.Int(&j.Attempt)
		case "max_attempts":
			return s.Int(&j.MaxAttempts)
		case "attempt_base":
			return s.Int(&j.AttemptBase)
		case "lease_ttl":
			return i64((*int64)(&j.LeaseTTL))
		case "last_lease_id":
			return s.String(&j.LastLeaseID)
		case "releases":
			return s.Int(&j.Releases)
		case "run_at":
			return s.TimeValue(&j.RunAt)
		case "lease":
			if j.Lease != nil {
				return false
			}
			if s.Null() {
				return true
			}
			l := &Lease{}
			j.Lease = l
			return s.Object(false, func(k []byte) bool {
				switch string(k) {
				case "lease_id":
					return s.String(&l.LeaseID)
				case "worker_id":
					return s.String(&l.WorkerID)
				case "session_id":
					return s.String(&l.SessionID)
				case "nonce":
					return s.String(&l.Nonce)
				case "attempt":
					return s.Int(&l.Attempt)
				case "expires_at":
					return s.TimeValue(&l.ExpiresAt)
				}
				return false
			})
		case "cancel_requested":
			return s.Bool(&j.CancelRequested)
		case "output":
			return s.Raw(&j.Output)
		case "output_hash":
			return s.String(&j.OutputHash)
		case "succeeded_lease":
			return s.String(&j.SucceededLease)
		case "succeeded_seq":
			return s.Uint64(&j.SucceededSeq)
		case "succeeded_nonce":
			return s.String(&j.SucceededNonce)
		case "signature":
			return s.String(&j.Signature)
		case "error":
			if j.Error != nil {
				return false
			}
			if s.Null() {
				return true
			}
			e := &JobError{}
			j.Error = e
			return s.Object(false, func(k []byte) bool {
				switch string(k) {
				case "code":
					return s.String(&e.Code)
				case "message":
					return s.String(&e.Message)
				}
				return false
			})
		case "dead_reason":
			return s.String(&j.DeadReason)
		case "created_at":
			return s.TimeValue(&j.CreatedAt)
		case "updated_at":
			return s.TimeValue(&j.UpdatedAt)
		case "started_at":
			return s.TimeValue(&j.StartedAt)
		case "worker_id":
			return s.String(&j.WorkerID)
		case "finished_at":
			return s.TimeValue(&j.FinishedAt)
		case "idempotency_key":
			return s.String(&j.IdempotencyKey)
		case "request_hash":
			return s.String(&j.RequestHash)
		case "result_ttl":
			return i64((*int64)(&j.ResultTTL))
		case "flow_id":
			return s.String(&j.FlowID)
		case "flow_step":
			return s.String(&j.FlowStep)
		case "schedule_id":
			return s.String(&j.ScheduleID)
		case "concurrency_key":
			return s.String(&j.ConcurrencyKey)
		case "rate_limits":
			return eventlog.ScanRateLimits(&s, &j.RateLimits)
		case "traceparent":
			return s.String(&j.Traceparent)
		case "submit_seq":
			return s.Uint64(&j.SubmitSeq)
		case "last_seq":
			return s.Uint64(&j.LastSeq)
		case "worker_seq":
			return s.Int(&j.WorkerSeq)
		case "worker_seq_event":
			return s.Int(&j.WorkerSeqEvent)
		case "events":
			return s.Int(&j.Events)
		case "progress":
			if j.Progress != nil {
				return false
			}
			j.Progress = []Progress{}
			return s.Array(func() bool {
				j.Progress = append(j.Progress, Progress{})
				p := &j.Progress[len(j.Progress)-1]
				return s.Object(false, func(k []byte) bool {
					switch string(k) {
					case "number":
						return s.Int(&p.Number)
					case "seq":
						return s.Uint64(&p.Seq)
					case "time":
						return s.TimeValue(&p.Time)
					case "event_type":
						return s.String(&p.Kind)
					case "data":
						return s.Raw(&p.Data)
					case "worker_seq":
						return s.Int(&p.WorkerSeq)
					}
					return false
				})
			})
		case "events_truncated":
			return s.Bool(&j.EventsTruncated)
		}
		return false
	})
	return j, ok
}
