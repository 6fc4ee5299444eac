package projections

import (
	"encoding/json"

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
// that it gave up.
func appendJob(dst []byte, j *Job) ([]byte, bool) {
	w := fastjson.NewWriter(dst)
	w.Str("id", j.ID, true)
	w.Str("tenant", j.Tenant, true)
	w.Str("queue", j.Queue, true)
	w.Str("type", j.Type, true)
	w.Raw("payload", j.Payload, true)
	w.Int("priority", j.Priority, true)
	if len(j.Labels) > 0 {
		w.Object("labels", func(w *fastjson.Writer) {
			for _, k := range sortedKeys(j.Labels) {
				w.Str(k, j.Labels[k], true)
			}
		})
	}
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
