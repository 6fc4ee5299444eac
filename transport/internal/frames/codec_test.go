package frames

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

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

// Every field of a frame the fast encoder writes comes out as encoding/json writes it: a field
// added to wire.Frame and forgotten here would be dropped silently, and this fails.
func TestFastEncoderWritesEveryField(t *testing.T) {
	v := reflect.ValueOf(&wire.Frame{}).Elem()
	at := time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC)
	samples := map[reflect.Type]any{
		reflect.TypeOf(""): "x", reflect.TypeOf(0): 7, reflect.TypeOf(0.0): 2.5, reflect.TypeOf([]string{}): []string{"a"},
		reflect.TypeOf(json.RawMessage{}): json.RawMessage(`{"a":1}`), reflect.TypeOf(new(bool)): new(true),
		reflect.TypeOf(new(time.Time)): &at, reflect.TypeOf(new(float64)): new(0.0), reflect.TypeOf(new(wire.Receipt)): &wire.Receipt{Seq: 1, Hash: "h"},
		reflect.TypeOf(new(wire.ErrorDetail)): &wire.ErrorDetail{Code: "C", Message: "m", Details: map[string]any{}},
	}
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		sample, ok := samples[v.Field(i).Type()]
		if !ok {
			t.Fatalf("field %s is of a type this test has no sample of: %s", name, v.Field(i).Type())
		}
		var f wire.Frame
		reflect.ValueOf(&f).Elem().Field(i).Set(reflect.ValueOf(sample))
		got, ok := appendFast(nil, &f)
		if !ok {
			continue // left to encoding/json: nothing lost
		}
		want, _ := json.Marshal(f)
		if !bytes.Equal(got, want) {
			t.Fatalf("field %s: fast %s, want %s", name, got, want)
		}
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
		if !decodeFast(want, &fast) {
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

// Whatever the fast decoder takes, it decodes as json.Unmarshal does; what it does not take,
// Decode leaves to json.Unmarshal.
func FuzzDecodeMatchesUnmarshal(f *testing.F) {
	for _, fr := range hotFrames() {
		b, _ := json.Marshal(fr)
		f.Add(b)
	}
	for _, s := range []string{
		`{}`, ` { "type" : "ack" , "ok" : true } `, `{"type":"a","type":"b"}`, `{"Type":"x"}`, `{"n":01}`, `{"n":1.0}`,
		`{"n":-0}`, `{"n":1e2}`, `{"output":nil}`, `{"payload":{"a":"}"}}`, `{"payload":[1,2}`, `{"data":"\u00e9"}`,
		`{"job_id":"\u00e9"}`, `{"job_id":null}`, `{"ok":null}`, `{"ok":tru}`, `{"receipt":{"hash":"h","seq":1}}`,
		`{"lease_expires_at":"2026-02-30T00:00:00Z"}`, `{"message":"` + "\xff" + `"}`, `{"type":"ack"} x`, `{"n":123456789012345678}`,
		`{"payload":1 }`, `{"payload":"x"`, `{"data":{"a":[{"b":"]"}]}}`, `{"cancel":["l1"]}`, `{"unknown":["x"]}`,
		`{"leases":["a"]}`, `{"heartbeat_seconds":10}`, `{"heartbeat_seconds":1.6666666666666667}`, `{"heartbeat_seconds":-0}`,
		`{"heartbeat_seconds":1e400}`, `{"heartbeat_seconds":.5}`, `{"heartbeat_seconds":1.}`, `{"heartbeat_seconds":2E-3}`, `{"reason":"r"}`,
		`{"public_key":"k"}`, `{"error":{"code":"X","message":"m","details":{}}}`, `{"receipt":{"seq":-1,"hash":"h"}}`,
		`{"receipt":{"seq":1},"receipt":{"hash":"h"}}`, `{"ok":true,"ok":false}`, `{"receipt":{"seq":-0}}`, `{"receipt":{"seq":0}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow wire.Frame
		if !decodeFast(data, &fast) {
			return
		}
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("%q: the fast decoder took what encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", data, fast, slow)
		}
		var viaDecode wire.Frame
		if err := Decode(data, &viaDecode); err != nil || !reflect.DeepEqual(viaDecode, slow) {
			t.Fatalf("%q: Decode %+v %v", data, viaDecode, err)
		}
	})
}

// Whatever the fast encoder writes is what json.Marshal writes.
func FuzzEncodeMatchesMarshal(f *testing.F) {
	f.Add("assign", "01KAR7", int64(1), []byte(`{"a":1}`), true, int64(1763772000123456789), int64(0))
	f.Add("ack", "<&>", int64(-3), []byte(`[1,2]`), false, int64(-62135596800), int64(3600))
	f.Add("ack", "a", int64(-3), []byte(`[1, 2]`), false, int64(0), int64(0))
	f.Add("ack", "a", int64(-3), []byte(`"<"`), false, int64(0), int64(0))
	f.Add("ack", "a", int64(-3), []byte(`{"a":`), false, int64(0), int64(0))
	f.Add("x\"y", "é", int64(0), []byte(`"\u2028"`), true, int64(253402300800), int64(86400))
	f.Add("", "", int64(1<<40), []byte(``), false, int64(0), int64(-7))
	f.Fuzz(func(t *testing.T, typ, s string, n int64, raw []byte, b bool, unix, offset int64) {
		at := time.Unix(0, unix).In(time.FixedZone("z", int(offset%(48*3600))))
		fr := wire.Frame{Type: typ, Ref: s, N: int(n), JobID: s, Payload: raw, Output: raw, Retryable: &b, LeaseExpiresAt: &at,
			Leases: []string{s}, Receipt: &wire.Receipt{Seq: uint64(n), Hash: s}, Attempt: int(n), Reason: s,
			HeartbeatSeconds: float64(n) / 3, LeaseTTLSeconds: math.Float64frombits(uint64(unix))}
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
