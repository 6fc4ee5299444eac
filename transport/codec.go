package transport

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/tetherhq/tether/actors"
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
	return s.Object(true, func(key []byte) bool { return submitField(&s, key, req) })
}

// decodeBatchFast decodes a batch body into req, which must be zero, as the strict decoder
// would, if every job in it is one decodeSubmitFast takes.
func decodeBatchFast(body []byte, req *wire.BatchRequest) bool {
	s := fastjson.Scanner{B: body}
	return s.Object(true, func(key []byte) bool {
		if string(key) != "jobs" || req.Jobs != nil {
			return false // a second "jobs" (checkJSON refuses it) or a field the strict decoder refuses
		}
		req.Jobs = make([]wire.SubmitRequest, 0, batchJobsGuess(body))
		return s.Array(func() bool {
			req.Jobs = append(req.Jobs, wire.SubmitRequest{})
			job := &req.Jobs[len(req.Jobs)-1]
			return s.Object(false, func(key []byte) bool { return submitField(&s, key, job) })
		})
	})
}

// batchJobsGuess is the room decodeBatchFast makes for a batch's jobs at first: one per
// "queue" key in the body (every job names its queue), at most actors.BatchJobsMax + 1, so
// that a batch over the limit is still decoded and then refused with its count.
func batchJobsGuess(body []byte) int {
	return min(bytes.Count(body, []byte(`"queue"`)), actors.BatchJobsMax+1)
}

// submitField decodes the member key of a submit, whose value s is at, into req; it reports
// false for a member it leaves to the strict decoder.
func submitField(s *fastjson.Scanner, key []byte, req *wire.SubmitRequest) bool {
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
	case "concurrency_key":
		return s.String(&req.ConcurrencyKey)
	case "rate_limits":
		if req.RateLimits != nil {
			return false // given twice: the strict decoder refuses it
		}
		req.RateLimits = []wire.RateLimitUse{}
		return s.Array(func() bool {
			req.RateLimits = append(req.RateLimits, wire.RateLimitUse{})
			u := &req.RateLimits[len(req.RateLimits)-1]
			return s.Object(false, func(k []byte) bool {
				switch string(k) {
				case "name":
					return s.String(&u.Name)
				case "key":
					return s.String(&u.Key)
				}
				return false
			})
		})
	}
	return false
}

// appendJob appends the job resource as a json.Encoder writes it, newline included, and
// reports true; or reports false when j holds something it leaves to encoding/json.
func appendJob(dst []byte, j *wire.Job) ([]byte, bool) {
	w := fastjson.NewWriter(dst)
	writeJobMembers(&w, j)
	b, ok := w.Close()
	if !ok {
		return dst, false
	}
	return append(b, '\n'), true
}

// appendBatch appends the answer to a batch submit as a json.Encoder writes it, newline
// included, and reports true; or reports false when a job holds something appendJob leaves to
// encoding/json.
func appendBatch(dst []byte, out *wire.BatchResponse) ([]byte, bool) {
	w := fastjson.NewWriter(dst)
	if out.Jobs == nil {
		w.Null("jobs")
	} else {
		w.Array("jobs", len(out.Jobs), func(w *fastjson.Writer, i int) { writeJobMembers(w, &out.Jobs[i]) })
	}
	writeReceipt(&w, out.Receipt)
	b, ok := w.Close()
	if !ok {
		return dst, false
	}
	return append(b, '\n'), true
}

// writeJobMembers writes the members of the job resource, in wire.Job's order; it sets w.OK
// false when j holds something it leaves to encoding/json.
func writeJobMembers(w *fastjson.Writer, j *wire.Job) {
	w.Str("id", j.ID, true)
	w.Str("tenant", j.Tenant, true)
	w.Str("queue", j.Queue, true)
	w.Str("type", j.Type, true)
	w.Raw("payload", j.Payload, true)
	w.Int("priority", j.Priority, true)
	writeLabels(w, j.Labels)
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
		w.Key("lease")
		inner := fastjson.NewWriter(w.B)
		inner.Str("lease_id", l.LeaseID, true)
		inner.Str("worker_id", l.WorkerID, true)
		inner.Time("expires_at", l.ExpiresAt)
		closeInner(w, &inner)
	}
	w.Bool("cancel_requested", j.CancelRequested)
	w.Raw("output", j.Output, true)
	w.Str("output_hash", j.OutputHash, false)
	if j.Error != nil {
		w.OK = false // a failed job's answer is not the hot path
		return
	}
	w.Null("error")
	w.Str("dead_reason", j.DeadReason, false)
	w.Time("created_at", j.CreatedAt)
	w.Time("updated_at", j.UpdatedAt)
	if j.StartedAt != nil || j.FinishedAt != nil || j.ExpiresAt != nil || j.WorkerID != nil {
		w.OK = false // the submit's answer, the hot path, has none of these
		return
	}
	w.Null("started_at")
	w.Null("finished_at")
	w.Null("expires_at")
	w.Null("worker_id")
	w.Bool("events_truncated", j.EventsTruncated)
	w.Str("flow_id", j.FlowID, false)
	w.Str("flow_step", j.FlowStep, false)
	w.Str("schedule_id", j.ScheduleID, false)
	w.Str("concurrency_key", j.ConcurrencyKey, false)
	if len(j.RateLimits) > 0 {
		w.Array("rate_limits", len(j.RateLimits), func(w *fastjson.Writer, i int) {
			w.Str("name", j.RateLimits[i].Name, true)
			w.Str("key", j.RateLimits[i].Key, false)
		})
	}
	writeReceipt(w, j.Receipt)
	w.BoolPtr("idempotent_hit", j.IdempotentHit)
}

// labelsSortedMax is how many labels writeLabels sorts on the stack; more go to encoding/json's
// order through a slice.
const labelsSortedMax = 16

// writeLabels writes a job's labels with their keys sorted, as encoding/json writes a map.
func writeLabels(w *fastjson.Writer, labels map[string]string) {
	if labels == nil {
		w.Null("labels")
		return
	}
	w.Key("labels")
	if len(labels) == 0 {
		w.B = append(w.B, "{}"...)
		return
	}
	var room [labelsSortedMax]string
	keys := room[:0]
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	inner := fastjson.NewWriter(w.B)
	for _, k := range keys {
		inner.Str(k, labels[k], true)
	}
	closeInner(w, &inner)
}

// writeReceipt writes a receipt member, if there is one.
func writeReceipt(w *fastjson.Writer, r *wire.Receipt) {
	if r == nil {
		return
	}
	w.Key("receipt")
	inner := fastjson.NewWriter(w.B)
	inner.Uint("seq", r.Seq)
	inner.Str("hash", r.Hash, true)
	closeInner(w, &inner)
}

// closeInner ends an object written into w's bytes by inner, as fastjson.Writer.Object does
// without the closure it takes.
func closeInner(w, inner *fastjson.Writer) {
	b, ok := inner.Close()
	w.B, w.OK = b, w.OK && ok
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

// jsonContentType is the Content-Type of every JSON answer: one slice for all of them, as
// net/http only reads a header's values (and copies them when the header is written).
var jsonContentType = []string{"application/json"}

// autoLengthMax is the longest answer left to net/http to give a Content-Length: it sets one
// itself, without allocating, for an answer of under a few KB written whole before the handler
// returns (http.ResponseWriter's Write says so), and chunks a longer one. A longer answer gets
// its Content-Length here, so that no answer is chunked.
const autoLengthMax = 1 << 10

// writeJSON writes v as the answer, through codec.go for a job resource or a batch's answer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	p := answers.Get().(*[]byte)
	var b []byte
	ok := false
	switch v := v.(type) {
	case *wire.Job:
		b, ok = appendJob((*p)[:0], v)
	case *wire.BatchResponse:
		b, ok = appendBatch((*p)[:0], v)
	}
	if !ok {
		b = appendEncoded((*p)[:0], v)
	}
	send(w, status, b)
	putAnswer(p, b)
}

// writeJob writes the job resource as the answer. It takes j without making it escape, so a
// handler's job resource stays on its stack (what its pointers point at does not).
func writeJob(w http.ResponseWriter, status int, j *wire.Job) {
	p := answers.Get().(*[]byte)
	b, ok := appendJob((*p)[:0], j)
	if !ok {
		c := *j // only this copy escapes, and only here (what j points at escapes with it)
		b = appendEncoded((*p)[:0], &c)
	}
	send(w, status, b)
	putAnswer(p, b)
}

// writeJSONFlushed writes v and flushes it to the connection, and says whether that failed: an
// answer that carries leases must be known to have left, or the leases go back.
func writeJSONFlushed(w http.ResponseWriter, status int, v any) error {
	p := answers.Get().(*[]byte)
	b := appendEncoded((*p)[:0], v)
	send(w, status, b)
	putAnswer(p, b)
	return http.NewResponseController(w).Flush()
}

// appendEncoded appends v as a json.Encoder writes it, newline included. v is an answer's
// value, which encodes; if it did not, the answer is empty.
func appendEncoded(dst []byte, v any) []byte {
	buf := bytes.NewBuffer(dst)
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		return dst[:0]
	}
	return buf.Bytes()
}

// send writes an answer whose whole JSON body is b.
func send(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	if len(b) > autoLengthMax {
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func putAnswer(p *[]byte, b []byte) {
	if cap(b) <= keepMax {
		*p = b[:0]
		answers.Put(p)
	}
}
