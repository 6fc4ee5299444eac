package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/wire"
)

// The bench's submit, and the answer to it, take the fast paths.
func TestSubmitAndItsAnswerTakeTheFastPath(t *testing.T) {
	body := []byte(`{"queue":"bench-0123","type":"noop","payload":{"sent":1763772000000000000}}`)
	var fast, strict wire.SubmitRequest
	if !decodeSubmitFast(body, &fast) {
		t.Fatal("the bench's submit was not decoded fast")
	}
	if err := decodeStrict(bytes.NewReader(body), &strict); err != nil || !reflect.DeepEqual(fast, strict) {
		t.Fatalf("fast %+v, strict %+v %v", fast, strict, err)
	}
	at := time.Date(2026, 11, 22, 1, 2, 3, 4000, time.UTC)
	hit := false
	job := wire.Job{ID: "01KAR7ZQ6J3N6WQH1V9X8Y7Z6A", Tenant: "default", Queue: "bench-0123", Type: "noop",
		Payload: json.RawMessage(`{"sent":1}`), Labels: map[string]string{}, Status: "queued", MaxAttempts: 3,
		CreatedAt: at, UpdatedAt: at, Receipt: &wire.Receipt{Seq: 7, Hash: "ab"}, IdempotentHit: &hit}
	got, ok := appendJob(nil, &job)
	if !ok {
		t.Fatal("a submit's answer was not encoded fast")
	}
	if want := encoded(t, job); !bytes.Equal(got, want) {
		t.Fatalf("fast %s\nwant %s", got, want)
	}
}

func encoded(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Whatever the fast decoder takes, it decodes as the strict decoder does.
func FuzzSubmitDecodeMatchesStrict(f *testing.F) {
	for _, s := range []string{
		`{"queue":"q","type":"t","payload":{"a":[1,"x"]},"priority":-2,"max_attempts":5,"idempotency_key":"k","reservation_id":"r"}`,
		`{"queue":"q","run_at":"2026-11-22T01:02:03.5Z"}`, `{"queue":"q","run_at":"2026-13-22T01:02:03Z"}`, `{"Queue":"q"}`,
		`{"queue":"q","extra":1}`, `{"queue":"q"} {}`, `{"queue":"q","labels":{"a":"b"}}`, `{"delay_seconds":1.5}`,
		`{"payload":null}`, `{"priority":1e3}`, `{"queue":"\u00e9"}`, `{"queue":null}`, `{}`, ` {"queue" : "q" } `,
		"{\"queue\":\"q\xff\"}", "{\"payload\":\"\xff\xfe\"}", "{\"payload\":{\"k\xc3\":1}}", "{\"labels\":{\"a\":\"\xed\xa0\x80\"}}",
		`{"queue":"a","queue":"b"}`, `{"payload":{"a":1,"a":2}}`, `{"queue":"a","qu\u0065ue":"b"}`, `{"queue":"a","Queue":"b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast, strict wire.SubmitRequest
		if !decodeSubmitFast(body, &fast) {
			return
		}
		if err := decodeStrict(bytes.NewReader(body), &strict); err != nil {
			t.Fatalf("%q: the fast decoder took what the strict one refuses: %v", body, err)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Fatalf("%q: fast %+v, strict %+v", body, fast, strict)
		}
	})
}

// Whatever the fast encoder writes is what a json.Encoder writes.
func FuzzJobEncodeMatchesEncoder(f *testing.F) {
	f.Add("01KAR7", "default", []byte(`{"a":1}`), "k", "v", int64(1763772000123456789), int64(0), true, uint64(7))
	f.Add("<&>", "", []byte(`[1, 2]`), "", "", int64(-62135596800000000), int64(3600), false, uint64(0))
	f.Add("é", "x\"y", []byte(``), "b", "<", int64(0), int64(-7), true, uint64(1<<63))
	f.Fuzz(func(t *testing.T, s, s2 string, raw []byte, lk, lv string, unix, offset int64, b bool, seq uint64) {
		at := time.Unix(0, unix).In(time.FixedZone("z", int(offset%(48*3600))))
		j := wire.Job{ID: s, Tenant: s2, Queue: s, Type: s2, Payload: raw, Output: raw, Priority: int(unix % 100), Status: s,
			Attempt: int(offset), MaxAttempts: int(seq % 10), CancelRequested: b, OutputHash: s2, DeadReason: s,
			CreatedAt: at, UpdatedAt: at.Add(time.Second), EventsTruncated: !b, IdempotentHit: &b}
		if lk != "" {
			j.Labels = map[string]string{lk: lv, lk + "2": lv}
		}
		if b {
			j.RunAt, j.Lease, j.Receipt = &at, &wire.Lease{LeaseID: s, WorkerID: s2, ExpiresAt: at}, &wire.Receipt{Seq: seq, Hash: s2}
		}
		got, ok := appendJob(nil, &j)
		if !ok {
			return
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(j); err != nil {
			t.Fatalf("the fast encoder wrote %s where encoding/json fails: %v", got, err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("fast %s\nwant %s", got, want.Bytes())
		}
	})
}

// BenchmarkDecodeSubmit decodes a submit body as a request does: the bench's body, and one with
// a payload of a few KiB of nested objects and text.
func BenchmarkDecodeSubmit(b *testing.B) {
	var payload bytes.Buffer
	payload.WriteString(`{"items":[`)
	for i := range 40 {
		if i > 0 {
			payload.WriteByte(',')
		}
		fmt.Fprintf(&payload, `{"id":%d,"name":"item number %d","tags":["a","b","c"],"price":12.5,"note":"ünïcödé text"}`, i, i)
	}
	payload.WriteString(`]}`)
	for _, c := range []struct{ name, body string }{
		{"bench", `{"queue":"bench-0123","type":"noop","payload":{"sent":1763772000000000000}}`},
		{"4KiB", `{"queue":"q","type":"t","payload":` + payload.String() + `}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			data := []byte(c.body)
			body := bytes.NewReader(data)
			r := &request{Request: httptest.NewRequest(http.MethodPost, "/v1/jobs", io.NopCloser(body)), w: httptest.NewRecorder()}
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				body.Reset(data)
				var req wire.SubmitRequest
				if err := r.decode(1<<20, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
