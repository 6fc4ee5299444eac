package frames

import (
	"github.com/tetherhq/tether/eventlog/fastjson"
	"github.com/tetherhq/tether/transport/wire"
)

// The worker protocol's hot frames (assign, ack, complete, credit) are flat objects of short
// strings and numbers, on which encoding/json spends most of its time in reflection: decoding
// them was 13 % of the load generator's CPU. This codec handles them through fastjson, whose
// contract leaves everything else to encoding/json; FuzzDecodeMatchesUnmarshal and
// FuzzEncodeMatchesMarshal check that no frame comes out differently for the path it took, and
// TestEveryFieldIsCoded that no field of wire.Frame lacks a case here unless the test names it
// as left to encoding/json.

// decodeFast decodes data into f, which must be zero, if data is a JSON object whose keys are
// the frame's field names exactly and whose values fastjson reads. It reports false, with f in
// any state, for anything else: a key it does not know, an escape, a null, a float, a list.
func decodeFast(data []byte, f *wire.Frame, names *names) bool {
	s := fastjson.Scanner{B: data}
	return s.Object(true, func(key []byte) bool {
		switch string(key) {
		case "type":
			return frameTypes.read(&s, &f.Type)
		case "ref":
			return s.String(&f.Ref)
		case "capacity":
			return s.Int(&f.Capacity)
		case "n":
			return s.Int(&f.N)
		case "job_id":
			return s.String(&f.JobID)
		case "lease_id":
			return s.String(&f.LeaseID)
		case "event_type":
			return s.String(&f.EventType)
		case "data":
			return s.Raw(&f.Data)
		case "seq":
			return s.Int(&f.Seq)
		case "nonce":
			return s.String(&f.Nonce)
		case "output":
			return s.Raw(&f.Output)
		case "output_hash":
			return s.String(&f.OutputHash)
		case "signature":
			return s.String(&f.Signature)
		case "error_code":
			return s.String(&f.ErrorCode)
		case "message":
			return s.String(&f.Message)
		case "retryable":
			return s.BoolPtr(&f.Retryable)
		case "reason":
			return s.String(&f.Reason)
		case "worker_id":
			return s.String(&f.WorkerID)
		case "heartbeat_seconds":
			return s.Float64(&f.HeartbeatSeconds)
		case "traceparent":
			return s.String(&f.Traceparent)
		case "lease_ttl_seconds":
			return s.Float64(&f.LeaseTTLSeconds)
		case "public_key":
			return s.String(&f.PublicKey)
		case "queue":
			return names.read(&s, &f.Queue)
		case "job_type":
			return names.read(&s, &f.JobType)
		case "payload":
			return s.Raw(&f.Payload)
		case "attempt":
			return s.Int(&f.Attempt)
		case "lease_expires_at":
			return s.Time(&f.LeaseExpiresAt)
		case "ok":
			return s.BoolPtr(&f.OK)
		case "number":
			return s.Int(&f.Number)
		case "receipt":
			if f.Receipt == nil { // a second receipt is decoded into the first, as encoding/json does
				f.Receipt = new(wire.Receipt)
			}
			return decodeReceipt(&s, f.Receipt)
		}
		return false
	})
}

// names are the strings of names that recur on a connection (frame types, queues, job types),
// which a frame's name decodes to instead of a new string of its own: two allocations of an
// assignment's eight. It keeps the first namesMax it reads; nil keeps none.
type names struct {
	kept  []string
	fixed bool // no more are kept
}

// namesMax bounds the names a connection keeps: a worker takes jobs of at most 32 queues, and
// its jobs' types are mostly few; past it, a name costs its string as before. Only a name of
// at most nameLenMax bytes is kept (a queue's name is at most 64, a job type at most 128): a
// peer that sends long ones pins no memory to the connection.
const (
	namesMax   = 16
	nameLenMax = 128
)

// frameTypes are the protocol's frame types.
var frameTypes = &names{fixed: true, kept: []string{wire.FrameAssign, wire.FrameAck, wire.FrameComplete, wire.FrameCredit,
	wire.FrameHeartbeat, wire.FrameEvent, wire.FrameFail, wire.FrameRelease, wire.FrameCancel, wire.FrameHello, wire.FrameWelcome,
	wire.FrameRenew}}

// read reads a string as s.String does into dst, one of the names kept if it is one.
func (n *names) read(s *fastjson.Scanner, dst *string) bool {
	v, ok := s.Str()
	if n != nil {
		for _, k := range n.kept {
			if string(v) == k {
				*dst = k
				return ok
			}
		}
	}
	*dst = string(v)
	if n != nil && ok && !n.fixed && len(n.kept) < namesMax && len(v) <= nameLenMax {
		n.kept = append(n.kept, *dst)
	}
	return ok
}

// decodeReceipt decodes {"seq":N,"hash":"..."}.
func decodeReceipt(s *fastjson.Scanner, r *wire.Receipt) bool {
	return s.Object(false, func(key []byte) bool {
		switch string(key) {
		case "seq":
			return s.Uint64(&r.Seq)
		case "hash":
			return s.String(&r.Hash)
		}
		return false
	})
}

// appendFast appends f as json.Marshal would write it and reports true, or reports false when
// f holds something whose encoding it leaves to encoding/json (see fastjson.Writer), a float
// an error, or the token fields.
func appendFast(dst []byte, f *wire.Frame) ([]byte, bool) {
	if f.Error != nil || f.WorkerToken != "" || f.TokenExpiresAt != nil || f.TokenRenewSeconds != nil {
		return dst, false // rare frames: a welcome, a heartbeat's ack, a renewal
	}
	w := fastjson.NewWriter(dst)
	w.Str("type", f.Type, true)
	w.Str("ref", f.Ref, false)
	w.Int("capacity", f.Capacity, false)
	w.Int("n", f.N, false)
	w.List("leases", f.Leases)
	w.Str("job_id", f.JobID, false)
	w.Str("lease_id", f.LeaseID, false)
	w.Str("event_type", f.EventType, false)
	w.Raw("data", f.Data, false)
	w.Int("seq", f.Seq, false)
	w.Str("nonce", f.Nonce, false)
	w.Raw("output", f.Output, false)
	w.Str("output_hash", f.OutputHash, false)
	w.Str("signature", f.Signature, false)
	w.Str("error_code", f.ErrorCode, false)
	w.Str("message", f.Message, false)
	w.BoolPtr("retryable", f.Retryable)
	w.Str("reason", f.Reason, false)
	w.Str("worker_id", f.WorkerID, false)
	w.Float("heartbeat_seconds", f.HeartbeatSeconds, false)
	w.Float("lease_ttl_seconds", f.LeaseTTLSeconds, false)
	w.Str("public_key", f.PublicKey, false)
	w.Str("queue", f.Queue, false)
	w.Str("job_type", f.JobType, false)
	w.Raw("payload", f.Payload, false)
	w.Int("attempt", f.Attempt, false)
	if f.LeaseExpiresAt != nil {
		w.Time("lease_expires_at", *f.LeaseExpiresAt)
	}
	w.Str("traceparent", f.Traceparent, false)
	w.BoolPtr("ok", f.OK)
	w.List("cancel", f.Cancel)
	w.List("unknown", f.Unknown)
	w.Int("number", f.Number, false)
	if r := f.Receipt; r != nil {
		w.Object("receipt", func(w *fastjson.Writer) { w.Uint("seq", r.Seq); w.Str("hash", r.Hash, true) })
	}
	b, ok := w.Close()
	if !ok {
		return dst, false
	}
	return b, true
}
