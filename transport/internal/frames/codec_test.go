package frames

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog/schematest"
	"github.com/tetherhq/tether/transport/wire"
)

// hotFrames are the frames a job's life sends, as the server and the Go client build them.
func hotFrames() []wire.Frame {
	at := time.Date(2026, 11, 22, 1, 2, 3, 450000000, time.UTC)
	yes, no := true, false
	return []wire.Frame{
		{Type: wire.FrameHello, Capacity: 4},
		{Type: wire.FrameCredit, N: 1},
		{Type: wire.FrameAssign, JobID: "01KAR7ZQ6J3N6WQH1V9X8Y7Z6A", LeaseID: "01KAR7ZQ6J3N6WQH1V9X8Y7Z6B", Nonce: "0123abcd",
			Queue: "default", JobType: "noop", Payload: json.RawMessage(`{"sent":1763772000000000000,"msg":"a b","list":[1,2,{"x":null}]}`), Attempt: 1, LeaseExpiresAt: &at,
			HeartbeatSeconds: 10},
		{Type: wire.FrameAssign, JobID: "j", LeaseID: "l", Nonce: "n", Queue: "q", JobType: "t", Attempt: 2, LeaseExpiresAt: &at,
			HeartbeatSeconds: 5.0 / 3},
		{Type: wire.FrameRelease, Ref: "21", JobID: "j", LeaseID: "l", Reason: "worker_stopping", Message: "the worker stopped"},
		{Type: wire.FrameComplete, Ref: "17", JobID: "j", LeaseID: "l", Nonce: "n", Output: json.RawMessage(`null`),
			OutputHash: "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b", Signature: "c2ln"},
		{Type: wire.FrameFail, Ref: "18", JobID: "j", LeaseID: "l", ErrorCode: "error", Message: "exit status 3", Retryable: &no},
		{Type: wire.FrameEvent, Ref: "19", JobID: "j", LeaseID: "l", EventType: "log", Data: json.RawMessage(`"line one"`), Seq: 4},
		{Type: wire.FrameAck, Ref: "17", OK: &yes, Receipt: &wire.Receipt{Seq: 123456, Hash: "9f86d081"}},
		{Type: wire.FrameAck, Ref: "19", OK: &yes, Number: 3},
		{Type: wire.FrameCancel, JobID: "j", LeaseID: "l"},
		{Type: wire.FrameHeartbeat, Ref: "20", Leases: []string{"l1", "l2"}},
	}
}

// The fields whose frames each fast path leaves to encoding/json, as codec.go says: the rare
// frames' fields (a welcome's or a renewal's token, an error) both ways, and lists one way.
var (
	encodedSlowly = map[string]bool{"Error": true, "WorkerToken": true, "TokenExpiresAt": true, "TokenRenewSeconds": true}
	decodedSlowly = map[string]bool{"Error": true, "WorkerToken": true, "TokenExpiresAt": true, "TokenRenewSeconds": true,
		"Leases": true, "Cancel": true, "Unknown": true}
)

// Every field of a frame is written by the fast encoder as json.Marshal writes it, and read by
// the fast decoder as json.Unmarshal reads it, each field alone and all at once; a field added
// to wire.Frame without a case in codec.go fails here, naming it, unless it is one the codec
// leaves to encoding/json. (schematest says why this is a reflection test.)
func TestEveryFieldIsCoded(t *testing.T) {
	rt := reflect.TypeFor[wire.Frame]()
	check := func(what string, v reflect.Value, encodeSlowly, decodeSlowly bool) {
		t.Helper()
		f := v.Interface().(*wire.Frame)
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := appendFast(nil, f); ok && !bytes.Equal(got, want) {
			t.Errorf("a frame with %s set: the fast encoder wrote %s\njson.Marshal writes %s", what, got, want)
		} else if !ok && !encodeSlowly {
			t.Errorf("a frame with %s set: the fast encoder leaves it to encoding/json (codec.go's appendFast lacks it)", what)
		}
		var fast, viaJSON wire.Frame
		if err := json.Unmarshal(want, &viaJSON); err != nil {
			t.Fatal(err)
		}
		if ok := decodeFast(want, &fast, nil); ok && !reflect.DeepEqual(fast, viaJSON) {
			t.Errorf("a frame with %s set: %s\nthe fast decoder read %+v\njson.Unmarshal reads %+v", what, want, fast, viaJSON)
		} else if !ok && !decodeSlowly {
			t.Errorf("a frame with %s set: %s\nthe fast decoder leaves it to encoding/json (codec.go's decodeFast lacks it)", what, want)
		}
	}
	// Every field but the rare ones at once takes both fast paths.
	fields := schematest.Fields(rt)
	common := reflect.New(rt)
	for _, f := range fields {
		if top, _, _ := strings.Cut(f.Path, "."); !encodedSlowly[top] && !decodedSlowly[top] {
			schematest.Set(common.Elem(), f)
		}
	}
	check("every field but the rare ones and the lists", common, false, false)
	for _, f := range fields {
		top, _, _ := strings.Cut(f.Path, ".")
		check(f.Path+" ("+f.JSON+")", schematest.New(rt, f), encodedSlowly[top], decodedSlowly[top])
	}
}

// The hot frames take the fast paths both ways, and come out as encoding/json has them.
func TestHotFramesTakeTheFastPath(t *testing.T) {
	for _, f := range hotFrames() {
		got, ok := appendFast(nil, &f)
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("%s: fast encoding %v %s, want %s", f.Type, ok, got, want)
		}
		if f.Leases != nil {
			continue // lists are encoded fast but decoded by encoding/json: they are rare
		}
		var fast, slow wire.Frame
		if !decodeFast(want, &fast, nil) {
			t.Fatalf("%s: %s was not decoded fast", f.Type, want)
		}
		if err := json.Unmarshal(want, &slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%s: fast %+v, encoding/json %+v", f.Type, fast, slow)
		}
	}
}

// decodeSeeds are FuzzDecodeMatchesUnmarshal's seeds: the hot frames and edge cases, which
// between them set every field of a frame.
func decodeSeeds() [][]byte {
	var out [][]byte
	for _, fr := range hotFrames() {
		b, _ := json.Marshal(fr)
		out = append(out, b)
	}
	for _, s := range []string{
		`{}`, ` { "type" : "ack" , "ok" : true } `, `{"type":"a","type":"b"}`, `{"Type":"x"}`, `{"n":01}`, `{"n":1.0}`,
		`{"n":-0}`, `{"n":1e2}`, `{"output":nil}`, `{"payload":{"a":"}"}}`, `{"payload":[1,2}`, `{"data":"\u00e9"}`,
		`{"job_id":"\u00e9"}`, `{"job_id":null}`, `{"ok":null}`, `{"ok":tru}`, `{"receipt":{"hash":"h","seq":1}}`,
		`{"lease_expires_at":"2026-02-30T00:00:00Z"}`, `{"message":"` + "\xff" + `"}`, `{"type":"ack"} x`, `{"n":123456789012345678}`,
		`{"payload":1 }`, `{"payload":"x"`, `{"data":{"a":[{"b":"]"}]}}`, `{"cancel":["l1"]}`, `{"unknown":["x"]}`,
		`{"leases":["a"]}`, `{"heartbeat_seconds":10}`, `{"heartbeat_seconds":1.6666666666666667}`, `{"heartbeat_seconds":-0}`,
		`{"heartbeat_seconds":1e400}`, `{"heartbeat_seconds":.5}`, `{"heartbeat_seconds":1.}`, `{"heartbeat_seconds":2E-3}`, `{"reason":"r"}`,
		`{"public_key":"k"}`, `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`, `{"error":{"code":"X","message":"m","details":{}}}`, `{"receipt":{"seq":-1,"hash":"h"}}`,
		`{"receipt":{"seq":1},"receipt":{"hash":"h"}}`, `{"ok":true,"ok":false}`, `{"receipt":{"seq":-0}}`, `{"receipt":{"seq":0}}`,
		`{"type":"welcome","worker_id":"w","heartbeat_seconds":10,"lease_ttl_seconds":30,"worker_token":"t","token_expires_at":"2026-11-29T01:02:03Z","token_renew_seconds":86400}`,
		`{"type":"ack","ref":"3","ok":false,"error":{"code":"LEASE_MISMATCH","message":"m","details":{"a":1},"request_id":"r"}}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// Whatever the fast decoder takes, it decodes as json.Unmarshal does; what it does not take,
// decode leaves to json.Unmarshal.
func FuzzDecodeMatchesUnmarshal(f *testing.F) {
	for _, b := range decodeSeeds() {
		f.Add(b)
	}
	var kept names // across inputs, as a connection's across frames
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow wire.Frame
		if !decodeFast(data, &fast, nil) {
			return
		}
		var named wire.Frame
		if !decodeFast(data, &named, &kept) || !reflect.DeepEqual(named, fast) {
			t.Fatalf("%q: with the names kept %+v, without %+v", data, named, fast)
		}
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("%q: the fast decoder took what encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", data, fast, slow)
		}
		var viaDecode wire.Frame
		if err := decode(data, &viaDecode, nil); err != nil || !reflect.DeepEqual(viaDecode, slow) {
			t.Fatalf("%q: decode %+v %v", data, viaDecode, err)
		}
	})
}

// frameArgs are FuzzEncodeMatchesMarshal's arguments, from which fuzzFrame builds a frame.
type frameArgs struct {
	typ, s       string
	n            int64
	raw          []byte
	b            bool
	unix, offset int64
	rare         uint8
}

// encodeSeeds are FuzzEncodeMatchesMarshal's seeds.
var encodeSeeds = []frameArgs{
	{"assign", "01KAR7", 1, []byte(`{"a":1}`), true, 1763772000123456789, 0, 0},
	{"ack", "<&>", -3, []byte(`[1,2]`), false, -62135596800, 3600, 0xff},
	{"ack", "a", -3, []byte(`[1, 2]`), false, 0, 0, 1},
	{"ack", "a", -3, []byte(`"<"`), false, 0, 0, 2},
	{"ack", "a", -3, []byte(`{"a":`), false, 0, 0, 4},
	{"x\"y", "é", 0, []byte(`"\u2028"`), true, 253402300800, 86400, 8},
	{"", "", 1 << 40, []byte(``), false, 0, -7, 0},
}

// fuzzFrame builds a frame with every field set from the fuzzer's arguments; rare's low four
// bits say which of the rare frames' fields (which the fast encoder leaves to encoding/json) it
// also sets.
func fuzzFrame(a frameArgs) wire.Frame {
	typ, s, n, raw, b, unix, offset, rare := a.typ, a.s, a.n, a.raw, a.b, a.unix, a.offset, a.rare
	at := time.Unix(0, unix).In(time.FixedZone("z", int(offset%(48*3600))))
	fr := wire.Frame{Type: typ, Ref: s, Capacity: int(n % 64), N: int(n), Leases: []string{s}, JobID: s, LeaseID: typ,
		EventType: typ, Data: raw, Seq: int(n), Nonce: s, Output: raw, OutputHash: typ, Signature: s, ErrorCode: typ,
		Message: s, Retryable: &b, Reason: s, WorkerID: typ, HeartbeatSeconds: float64(n) / 3,
		LeaseTTLSeconds: math.Float64frombits(uint64(unix)), PublicKey: s, Queue: typ, JobType: s, Payload: raw,
		Attempt: int(n), LeaseExpiresAt: &at, Traceparent: typ, OK: &b, Cancel: []string{typ}, Unknown: []string{s}, Number: int(offset),
		Receipt: &wire.Receipt{Seq: uint64(n), Hash: s}}
	if rare&1 != 0 {
		fr.Error = &wire.ErrorDetail{Code: typ, Message: s, Details: map[string]any{s: n}, RequestID: typ}
	}
	if rare&2 != 0 {
		fr.WorkerToken = s
	}
	if rare&4 != 0 {
		fr.TokenExpiresAt = &at
	}
	if rare&8 != 0 {
		renew := float64(offset) / 7
		fr.TokenRenewSeconds = &renew
	}
	return fr
}

// The fuzzer's frames, from its seeds on, set every field of a frame.
func TestFuzzFrameSetsEveryField(t *testing.T) {
	var frames []wire.Frame
	for _, a := range encodeSeeds {
		frames = append(frames, fuzzFrame(a))
	}
	schematest.CheckSet(t, "fuzzFrame", frames)
	var decoded []wire.Frame
	for _, b := range decodeSeeds() {
		var f wire.Frame
		if json.Unmarshal(b, &f) == nil {
			decoded = append(decoded, f)
		}
	}
	schematest.CheckSet(t, "FuzzDecodeMatchesUnmarshal's seeds", decoded)
}

// Whatever the fast encoder writes is what json.Marshal writes.
func FuzzEncodeMatchesMarshal(f *testing.F) {
	for _, a := range encodeSeeds {
		f.Add(a.typ, a.s, a.n, a.raw, a.b, a.unix, a.offset, a.rare)
	}
	f.Fuzz(func(t *testing.T, typ, s string, n int64, raw []byte, b bool, unix, offset int64, rare uint8) {
		fr := fuzzFrame(frameArgs{typ, s, n, raw, b, unix, offset, rare})
		got, ok := appendFast(nil, &fr)
		if !ok {
			return
		}
		want, err := json.Marshal(fr)
		if err != nil {
			t.Fatalf("the fast encoder wrote %s where json.Marshal fails: %v", got, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("fast %s\nwant %s", got, want)
		}
	})
}

// An assignment's type, queue and job type decode to strings the connection keeps, from its
// second assignment on: what is left to allocate is the ids, the nonce, the payload and the
// lease's expiry.
func TestRecurringNamesAreNotAllocated(t *testing.T) {
	f := wire.Frame{Type: wire.FrameAssign, JobID: "job_01", LeaseID: "lease_01", Nonce: "6f1d3c2b", Queue: "emails", JobType: "send",
		Payload: json.RawMessage(`{"to":"a@b"}`), Attempt: 1, LeaseExpiresAt: new(time.Now().UTC()), HeartbeatSeconds: 10}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var kept names
	var got wire.Frame
	allocs := testing.AllocsPerRun(100, func() {
		if err := decode(data, &got, &kept); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 5 {
		t.Errorf("decoding an assignment allocates %.0f times, want 5 (job id, lease id, nonce, payload, expiry)", allocs)
	}
	if got.Queue != "emails" || got.JobType != "send" || got.Type != wire.FrameAssign {
		t.Errorf("decoded %+v", got)
	}
	// A long name is decoded, not kept: a peer cannot pin its frames' strings to the connection.
	long := strings.Repeat("q", nameLenMax+1)
	for i := range namesMax {
		data, _ := json.Marshal(wire.Frame{Type: wire.FrameAssign, Queue: long + strconv.Itoa(i)})
		if err := decode(data, &got, &kept); err != nil || got.Queue != long+strconv.Itoa(i) {
			t.Fatalf("decoded %q, %v", got.Queue, err)
		}
	}
	if len(kept.kept) != 2 {
		t.Errorf("names kept %d, want the 2 short ones", len(kept.kept))
	}
}
