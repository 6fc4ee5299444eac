package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog/schematest"
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

// submitSeeds are FuzzSubmitDecodeMatchesStrict's seeds, which between them set every field of
// a submit.
func submitSeeds() [][]byte {
	var out [][]byte
	for _, s := range []string{
		`{"queue":"q","type":"t","payload":{"a":[1,"x"]},"priority":-2,"max_attempts":5,"idempotency_key":"k","reservation_id":"r","concurrency_key":"customer 7"}`,
		`{"queue":"q","rate_limits":[{"name":"api","key":"team 1"},{"name":"gpu"}]}`, `{"rate_limits":null}`, `{"rate_limits":[{"name":"a","x":1}]}`,
		`{"rate_limits":[],"rate_limits":[{"name":"b"}]}`,
		`{"queue":"q","run_at":"2026-11-22T01:02:03.5Z"}`, `{"queue":"q","run_at":"2026-13-22T01:02:03Z"}`, `{"Queue":"q"}`,
		`{"queue":"q","extra":1}`, `{"queue":"q"} {}`, `{"queue":"q","labels":{"a":"b"}}`, `{"delay_seconds":1.5}`,
		`{"payload":null}`, `{"priority":1e3}`, `{"queue":"\u00e9"}`, `{"queue":null}`, `{}`, ` {"queue" : "q" } `,
		"{\"queue\":\"q\xff\"}", "{\"payload\":\"\xff\xfe\"}", "{\"payload\":{\"k\xc3\":1}}", "{\"labels\":{\"a\":\"\xed\xa0\x80\"}}",
		`{"queue":"a","queue":"b"}`, `{"payload":{"a":1,"a":2}}`, `{"queue":"a","qu\u0065ue":"b"}`, `{"queue":"a","Queue":"b"}`,
		`{"queue":"q","lease_ttl_seconds":30,"result_ttl_seconds":86400.5}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// Whatever the fast decoder takes, it decodes as the strict decoder does.
func FuzzSubmitDecodeMatchesStrict(f *testing.F) {
	fuzzMatchesStrict(f, submitSeeds(), decodeSubmitFast)
}

// fuzzMatchesStrict fuzzes a fast decoder from seeds: whatever it takes, it decodes as the
// strict decoder does.
func fuzzMatchesStrict[T any](f *testing.F, seeds [][]byte, fast func([]byte, *T) bool) {
	for _, b := range seeds {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var quick, strict T
		if !fast(body, &quick) {
			return
		}
		if err := decodeStrict(bytes.NewReader(body), &strict); err != nil {
			t.Fatalf("%q: the fast decoder took what the strict one refuses: %v", body, err)
		}
		if !reflect.DeepEqual(quick, strict) {
			t.Fatalf("%q: fast %+v, strict %+v", body, quick, strict)
		}
	})
}

// jobArgs are FuzzJobEncodeMatchesEncoder's arguments, from which fuzzJob builds a job.
type jobArgs struct {
	s, s2        string
	raw          []byte
	lk, lv       string
	unix, offset int64
	b            bool
	seq          uint64
	rare         uint8
}

// jobSeeds are FuzzJobEncodeMatchesEncoder's seeds.
var jobSeeds = []jobArgs{
	{"01KAR7", "default", []byte(`{"a":1}`), "k", "v", 1763772000123456789, 0, true, 7, 0},
	{"<&>", "", []byte(`[1, 2]`), "", "", -62135596800000000, 3600, false, 0, 0xff},
	{"é", "x\"y", []byte(``), "b", "<", 0, -7, true, 1 << 63, 0x15},
	{"s", "t", []byte(`"x"`), "k", "v", 1, 2, true, 3, 0x0a},
}

// fuzzJob builds a job resource from the fuzzer's arguments, with every field set or not; rare's
// low five bits say which of the fields a submit's answer lacks (which the fast encoder leaves
// to encoding/json) it sets.
func fuzzJob(a jobArgs) wire.Job {
	at := time.Unix(0, a.unix).In(time.FixedZone("z", int(a.offset%(48*3600))))
	j := wire.Job{ID: a.s, Tenant: a.s2, Queue: a.s, Type: a.s2, Payload: a.raw, Output: a.raw, Priority: int(a.unix % 100), Status: a.s,
		Attempt: int(a.offset), MaxAttempts: int(a.seq % 10), CancelRequested: a.b, OutputHash: a.s2, DeadReason: a.s,
		CreatedAt: at, UpdatedAt: at.Add(time.Second), EventsTruncated: !a.b, IdempotentHit: &a.b,
		FlowID: a.s2, FlowStep: a.s, ScheduleID: a.s2, ConcurrencyKey: a.s}
	if a.lk != "" {
		j.Labels = map[string]string{a.lk: a.lv, a.lk + "2": a.lv}
		j.RateLimits = []wire.RateLimitUse{{Name: a.lk, Key: a.lv}, {Name: a.lv}}
	}
	if a.b {
		j.RunAt, j.Lease, j.Receipt = &at, &wire.Lease{LeaseID: a.s, WorkerID: a.s2, ExpiresAt: at}, &wire.Receipt{Seq: a.seq, Hash: a.s2}
	}
	if a.rare&1 != 0 {
		j.Error = &wire.JobError{Code: a.s, Message: a.s2}
	}
	if a.rare&2 != 0 {
		j.StartedAt = &at
	}
	if a.rare&4 != 0 {
		j.FinishedAt = &at
	}
	if a.rare&8 != 0 {
		j.ExpiresAt = &at
	}
	if a.rare&16 != 0 {
		j.WorkerID = &a.s2
	}
	return j
}

// The fuzzers' jobs and submits, from their seeds on, set every field.
func TestFuzzersSetEveryField(t *testing.T) {
	var jobs []wire.Job
	for _, a := range jobSeeds {
		jobs = append(jobs, fuzzJob(a))
	}
	schematest.CheckSet(t, "fuzzJob", jobs)
	var submits []wire.SubmitRequest
	for _, b := range submitSeeds() {
		var req wire.SubmitRequest
		if decodeStrict(bytes.NewReader(b), &req) == nil {
			submits = append(submits, req)
		}
	}
	schematest.CheckSet(t, "FuzzSubmitDecodeMatchesStrict's seeds", submits)
}

// Whatever the fast encoder writes is what a json.Encoder writes.
func FuzzJobEncodeMatchesEncoder(f *testing.F) {
	fuzzEncodeMatches(f, func(j wire.Job) (any, []byte, bool) {
		got, ok := appendJob(nil, &j)
		return j, got, ok
	})
}

// fuzzEncodeMatches fuzzes a fast encoder of what encode makes of a job from the fuzzer's
// arguments: whatever it writes is what a json.Encoder writes of the value encode returns.
func fuzzEncodeMatches(f *testing.F, encode func(j wire.Job) (v any, got []byte, ok bool)) {
	for _, a := range jobSeeds {
		f.Add(a.s, a.s2, a.raw, a.lk, a.lv, a.unix, a.offset, a.b, a.seq, a.rare)
	}
	f.Fuzz(func(t *testing.T, s, s2 string, raw []byte, lk, lv string, unix, offset int64, b bool, seq uint64, rare uint8) {
		v, got, ok := encode(fuzzJob(jobArgs{s, s2, raw, lk, lv, unix, offset, b, seq, rare}))
		if !ok {
			return
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(v); err != nil {
			t.Fatalf("the fast encoder wrote %s where encoding/json fails: %v", got, err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("fast %s\nwant %s", got, want.Bytes())
		}
	})
}

// The fields of a job resource the fast encoder leaves to encoding/json (a failed job's error,
// what a submit's answer lacks), and those of a submit the fast decoder leaves to the strict
// one (floats, labels), as codec.go says.
var (
	jobEncodedSlowly    = map[string]bool{"Error": true, "StartedAt": true, "FinishedAt": true, "ExpiresAt": true, "WorkerID": true}
	submitDecodedSlowly = map[string]bool{"DelaySeconds": true, "LeaseTTLSeconds": true, "ResultTTLSeconds": true, "Labels": true}
)

// Every field of a job resource is written by the fast encoder as a json.Encoder writes it,
// and every field of a submit read by the fast decoder as the strict decoder reads it, each
// field alone and all at once; a field added to wire.Job or wire.SubmitRequest without a case
// in codec.go fails here, naming it, unless codec.go leaves it to encoding/json and this test
// says so. (schematest says why this is a reflection test.)
func TestEveryFieldIsCoded(t *testing.T) {
	jobType := reflect.TypeFor[wire.Job]()
	encode := func(what string, v reflect.Value, slowly bool) {
		t.Helper()
		j := v.Interface().(*wire.Job)
		want := encoded(t, j)
		if got, ok := appendJob(nil, j); ok && !bytes.Equal(got, want) {
			t.Errorf("a job with %s set: the fast encoder wrote %s\nencoding/json writes %s", what, got, want)
		} else if !ok && !slowly {
			t.Errorf("a job with %s set: the fast encoder leaves it to encoding/json (codec.go's appendJob lacks it)", what)
		}
	}
	submitType := reflect.TypeFor[wire.SubmitRequest]()
	decode := func(what string, v reflect.Value, slowly bool) {
		t.Helper()
		body, err := json.Marshal(v.Interface())
		if err != nil {
			t.Fatal(err)
		}
		var fast, strict wire.SubmitRequest
		if err := decodeStrict(bytes.NewReader(body), &strict); err != nil {
			t.Fatal(err)
		}
		if ok := decodeSubmitFast(body, &fast); ok && !reflect.DeepEqual(fast, strict) {
			t.Errorf("a submit with %s set: %s\nthe fast decoder read %+v\nthe strict one reads %+v", what, body, fast, strict)
		} else if !ok && !slowly {
			t.Errorf("a submit with %s set: %s\nthe fast decoder leaves it to the strict one (codec.go's decodeSubmitFast lacks it)", what, body)
		}
	}
	for _, c := range []struct {
		t      reflect.Type
		slowly map[string]bool
		check  func(string, reflect.Value, bool)
	}{{jobType, jobEncodedSlowly, encode}, {submitType, submitDecodedSlowly, decode}} {
		fields := schematest.Fields(c.t)
		common := reflect.New(c.t)
		for _, f := range fields {
			if top, _, _ := strings.Cut(f.Path, "."); !c.slowly[top] {
				schematest.Set(common.Elem(), f)
			}
		}
		c.check("every field the fast path takes", common, false)
		for _, f := range fields {
			top, _, _ := strings.Cut(f.Path, ".")
			c.check(f.Path+" ("+f.JSON+")", schematest.New(c.t, f), c.slowly[top])
		}
	}
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
				if err := r.decodeSubmit(1<<20, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// batchSeeds are FuzzBatchDecodeMatchesStrict's seeds.
func batchSeeds() [][]byte {
	out := [][]byte{[]byte(`{"jobs":[]}`), []byte(`{"jobs":null}`), []byte(`{}`), []byte(`{"jobs":[null]}`), []byte(`{"jobs":[{}]}`),
		[]byte(`{"jobs":[{"queue":"a"},{"queue":"b","extra":1}]}`), []byte(`{"jobs":[{"queue":"a"}],"jobs":[]}`), []byte(`{"Jobs":[{"queue":"a"}]}`),
		[]byte(`{"jobs":[{"queue":"a"}] , "x":1}`), []byte(`{"jobs":[{"queue":"a"}]}[]`), []byte(`{"jobs":{"queue":"a"}}`), []byte(` { "jobs" : [ {"queue":"a"} , {} ] } `)}
	for _, s := range submitSeeds() {
		out = append(out, append(append([]byte(`{"jobs":[`), s...), `,{"queue":"q"}]}`...))
	}
	return out
}

// Whatever the fast batch decoder takes, it decodes as the strict decoder does.
func FuzzBatchDecodeMatchesStrict(f *testing.F) { fuzzMatchesStrict(f, batchSeeds(), decodeBatchFast) }

// The bench's batch and the answer to it take the fast paths, and a batch of the shapes the
// fuzzer's job resources take is written as encoding/json writes it, or left to it.
func TestBatchAndItsAnswerTakeTheFastPath(t *testing.T) {
	body := []byte(`{"jobs":[{"queue":"q","type":"noop","payload":{"n":1}},{"queue":"q","type":"noop","payload":{"n":2},"priority":3}]}`)
	var fast, strict wire.BatchRequest
	if !decodeBatchFast(body, &fast) {
		t.Fatal("the bench's batch was not decoded fast")
	}
	if err := decodeStrict(bytes.NewReader(body), &strict); err != nil || !reflect.DeepEqual(fast, strict) {
		t.Fatalf("fast %+v, strict %+v %v", fast, strict, err)
	}
	var jobs []wire.Job
	for _, a := range jobSeeds {
		jobs = append(jobs, fuzzJob(a))
	}
	taken := 0
	for _, out := range []wire.BatchResponse{{}, {Jobs: []wire.Job{}}, {Jobs: jobs[:1], Receipt: &wire.Receipt{Seq: 9, Hash: "cd"}},
		{Jobs: jobs, Receipt: &wire.Receipt{Seq: 1, Hash: "ab"}}, {Jobs: jobs[2:]}} {
		got, ok := appendBatch(nil, &out)
		if !ok {
			continue
		}
		taken++
		if want := encoded(t, out); !bytes.Equal(got, want) {
			t.Fatalf("fast %s\nwant %s", got, want)
		}
	}
	if taken < 3 {
		t.Fatalf("only %d of 5 batch answers took the fast path", taken)
	}
}

// Whatever the fast encoder writes for a batch's answer is what a json.Encoder writes.
func FuzzBatchEncodeMatchesEncoder(f *testing.F) {
	fuzzEncodeMatches(f, func(j wire.Job) (any, []byte, bool) {
		out := wire.BatchResponse{Jobs: []wire.Job{j, j}}
		if j.Receipt != nil {
			out.Receipt = j.Receipt
		}
		got, ok := appendBatch(nil, &out)
		return out, got, ok
	})
}

// A job with more labels than writeLabels sorts on its stack is written as encoding/json
// writes it.
func TestManyLabelsAreSorted(t *testing.T) {
	j := fuzzJob(jobSeeds[0])
	j.Labels = map[string]string{}
	for i := range labelsSortedMax + 5 {
		j.Labels[fmt.Sprintf("k%02d", (i*7)%(labelsSortedMax+5))] = fmt.Sprint(i)
	}
	got, ok := appendJob(nil, &j)
	if !ok {
		t.Fatal("a job with many labels was not encoded fast")
	}
	if want := encoded(t, j); !bytes.Equal(got, want) {
		t.Fatalf("fast %s\nwant %s", got, want)
	}
}

// loopbackLiteral, the allocation-free shortcut, says loopback only of what loopbackHost's
// parse says it of.
func TestLoopbackLiteral(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:8080": true, "127.0.0.1": true, "127.0.0.1:18400": true, "[::1]": true, "[::1]:80": true,
		"localhost:": false, "localhost:x": false, "127.0.0.2": false, "example.com:80": false, "127.0.0.1:123456": false,
		"::1": false, "LOCALHOST": false, "127.0.0.1.example.com": false, "localhost:80:80": false,
	} {
		if got := loopbackLiteral(host); got != want {
			t.Errorf("loopbackLiteral(%q) = %v, want %v", host, got, want)
		}
		if loopbackLiteral(host) && !loopbackHost(host) {
			t.Errorf("loopbackLiteral takes %q, which loopbackHost refuses", host)
		}
	}
}
