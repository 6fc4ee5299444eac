package transport

import (
	"bytes"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/tetherhq/tether/eventlog/fastjson"
	"github.com/tetherhq/tether/transport/wire"
)

// A submit's body and its answer, the job resource, are the JSON the API decodes and encodes
// on every job, about a tenth of the server's CPU per job under load when encoding/json does
// it by reflection. This codec handles their usual shapes through fastjson, whose contract
// leaves the rest to encoding/json; FuzzSubmitDecodeMatchesStrict and
// FuzzJobEncodeMatchesEncoder check that nothing comes out differently for the path it took,
// and TestEveryFieldIsCoded that no field of wire.Job or wire.SubmitRequest lacks a case here
// unless the test names it as left to encoding/json.

// decodeSubmitFast decodes a submit body into req, which must be zero, as the strict decoder
// would, if fastjson can read every member. Members it leaves to the strict decoder: floats
// (delay_seconds, lease_ttl_seconds, result_ttl_seconds), labels, and any field it does not
// know, which the strict decoder refuses.
func decodeSubmitFast(body []byte, req *wire.SubmitRequest) bool {
	s := fastjson.Scanner{B: body}
	return s.Object(true, func(key []byte) bool {
		switch string(key) {
		case "queue":
			return s.String(&req.Queue)
		case "type":
			return s.String(&req.Type)
		case "payload":
			return s.Raw(&req.Payload)
		case "priority":
			return s.Int(&req.Priority)
		case "run_at":
			return s.Time(&req.RunAt)
		case "max_attempts":
			return s.Int(&req.MaxAttempts)
		case "idempotency_key":
			return s.String(&req.IdempotencyKey)
		case "reservation_id":
			return s.String(&req.ReservationID)
		}
		return false
	})
}

// appendJob appends the job resource as a json.Encoder writes it, newline included, and
// reports true; or reports false when j holds something it leaves to encoding/json.
func appendJob(dst []byte, j *wire.Job) ([]byte, bool) {
	w := fastjson.NewWriter(dst)
	w.Str("id", j.ID, true)
	w.Str("tenant", j.Tenant, true)
	w.Str("queue", j.Queue, true)
	w.Str("type", j.Type, true)
	w.Raw("payload", j.Payload, true)
	w.Int("priority", j.Priority, true)
	if j.Labels == nil {
		w.Null("labels")
	} else {
		w.Object("labels", func(w *fastjson.Writer) {
			for _, k := range slices.Sorted(maps.Keys(j.Labels)) { // encoding/json sorts map keys
				w.Str(k, j.Labels[k], true)
			}
		})
	}
	w.Str("status", j.Status, true)
	w.Int("attempt", j.Attempt, true)
	w.Int("max_attempts", j.MaxAttempts, true)
	if j.RunAt == nil {
		w.Null("run_at")
	} else {
		w.Time("run_at", *j.RunAt)
	}
	if l := j.Lease; l == nil {
		w.Null("lease")
	} else {
		w.Object("lease", func(w *fastjson.Writer) {
			w.Str("lease_id", l.LeaseID, true)
			w.Str("worker_id", l.WorkerID, true)
			w.Time("expires_at", l.ExpiresAt)
		})
	}
	w.Bool("cancel_requested", j.CancelRequested)
	w.Raw("output", j.Output, true)
	w.Str("output_hash", j.OutputHash, false)
	if j.Error != nil {
		return dst, false // a failed job's answer is not the hot path
	}
	w.Null("error")
	w.Str("dead_reason", j.DeadReason, false)
	w.Time("created_at", j.CreatedAt)
	w.Time("updated_at", j.UpdatedAt)
	if j.StartedAt != nil || j.FinishedAt != nil || j.ExpiresAt != nil || j.WorkerID != nil {
		return dst, false // the submit's answer, the hot path, has none of these
	}
	w.Null("started_at")
	w.Null("finished_at")
	w.Null("expires_at")
	w.Null("worker_id")
	w.Bool("events_truncated", j.EventsTruncated)
	w.Str("flow_id", j.FlowID, false)
	w.Str("flow_step", j.FlowStep, false)
	w.Str("schedule_id", j.ScheduleID, false)
	if r := j.Receipt; r != nil {
		w.Object("receipt", func(w *fastjson.Writer) { w.Uint("seq", r.Seq); w.Str("hash", r.Hash, true) })
	}
	w.BoolPtr("idempotent_hit", j.IdempotentHit)
	b, ok := w.Close()
	if !ok {
		return dst, false
	}
	return append(b, '\n'), true
}

// bodies are the submit bodies decode reads whole; answers the job resources writeJSON writes.
var (
	bodies  = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	answers = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}
)

// keepMax is the largest buffer that goes back to its pool: a rare large body or answer does
// not stay pinned.
const keepMax = 64 << 10

func getBody() *bytes.Buffer {
	b := bodies.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

func putBody(b *bytes.Buffer) {
	if b.Cap() <= keepMax {
		bodies.Put(b)
	}
}

// writeJob writes the job resource if appendJob can, and reports whether it did.
func writeJob(w io.Writer, j *wire.Job) bool {
	p := answers.Get().(*[]byte)
	b, ok := appendJob((*p)[:0], j)
	if ok {
		_, _ = w.Write(b)
	}
	if cap(b) <= keepMax {
		*p = b[:0]
		answers.Put(p)
	}
	return ok
}
