package projections

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// randomJob draws a job with every field set or not, strings that need escaping now and then,
// and payloads with whitespace, escapes and HTML characters now and then.
func randomJob(r *rand.Rand) *Job {
	str := func() string {
		switch r.IntN(8) {
		case 0:
			return ""
		case 1:
			return []string{`a"b`, `a\b`, "<x>&", "é", "\u2028", "tab\t", "\x00"}[r.IntN(7)]
		}
		return fmt.Sprintf("s%d", r.IntN(1000))
	}
	raw := func() json.RawMessage {
		switch r.IntN(8) {
		case 0:
			return nil
		case 1:
			return json.RawMessage(`{"a": 1}`)
		case 2:
			return json.RawMessage(`"<b>"`)
		case 3:
			return json.RawMessage(`"é\"x"`)
		}
		return json.RawMessage(fmt.Sprintf(`{"n":%d,"s":"v"}`, r.IntN(100)))
	}
	at := func() time.Time {
		if r.IntN(4) == 0 {
			return time.Time{}
		}
		return time.Unix(1_800_000_000+r.Int64N(1e6), r.Int64N(1e9)).UTC()
	}
	j := &Job{
		ID: str(), Tenant: str(), Queue: str(), Type: str(), Payload: raw(), Priority: r.IntN(5) - 2,
		Status: Status(str()), Attempt: r.IntN(3), MaxAttempts: r.IntN(5), AttemptBase: r.IntN(2),
		LeaseTTL: time.Duration(r.Int64N(1e11)), LastLeaseID: str(), Releases: r.IntN(2), RunAt: at(),
		CancelRequested: r.IntN(2) == 0, Output: raw(), OutputHash: str(), SucceededLease: str(),
		SucceededSeq: uint64(r.IntN(3)), SucceededNonce: str(), Signature: str(), DeadReason: str(),
		CreatedAt: at(), UpdatedAt: at(), StartedAt: at(), WorkerID: str(), FinishedAt: at(),
		IdempotencyKey: str(), RequestHash: str(), ResultTTL: time.Duration(r.Int64N(2) * r.Int64N(1e12)), FlowID: str(), FlowStep: str(), ScheduleID: str(), ConcurrencyKey: str(), Traceparent: str(),
		SubmitSeq: r.Uint64(), LastSeq: uint64(r.IntN(100)), WorkerSeq: r.IntN(2), WorkerSeqEvent: r.IntN(2),
		Events: r.IntN(10), EventsTruncated: r.IntN(2) == 0,
	}
	if r.IntN(2) == 0 {
		j.Labels = map[string]string{}
		for range r.IntN(3) {
			j.Labels[str()] = str()
		}
	}
	if r.IntN(2) == 0 {
		j.Lease = &Lease{LeaseID: str(), WorkerID: str(), SessionID: str(), Nonce: str(), Attempt: r.IntN(3), ExpiresAt: at()}
	}
	if r.IntN(2) == 0 {
		j.Error = &JobError{Code: str(), Message: str()}
	}
	for range r.IntN(3) {
		j.RateLimits = append(j.RateLimits, eventlog.RateLimitUse{Name: str(), Key: str()})
	}
	for range r.IntN(3) {
		j.Progress = append(j.Progress, Progress{Number: r.IntN(9), Seq: r.Uint64(), Time: at(), Kind: str(), Data: raw(), WorkerSeq: r.IntN(2)})
	}
	return j
}

// The table's encoding of a job is json.Marshal's, byte for byte, whichever path writes it; and
// the fast path writes the common jobs.
func TestEncodeJobIsMarshal(t *testing.T) {
	const seed = 20261124
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	fast := 0
	for i := range 20_000 {
		j := randomJob(r)
		want, werr := json.Marshal(j)
		got, err := encodeJob(j)
		if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("job %d: encodeJob = %s, %v\njson.Marshal = %s, %v", i, got, err, want, werr)
		}
		if _, ok := appendJob(nil, j); ok {
			fast++
		}
	}
	if fast < 100 {
		t.Fatalf("only %d of 20,000 jobs took the fast path", fast)
	}
	plain := &Job{ID: "01KDVDNAGA4PVZX4VG2DDTS60F", Tenant: "acme", Queue: "q", Type: "t", Payload: json.RawMessage(`{"n":1}`),
		Status: StatusSucceeded, Output: json.RawMessage(`{"ok":true}`), CreatedAt: time.Unix(1_800_000_000, 5).UTC(),
		Labels: map[string]string{"team": "x"}, Progress: []Progress{{Number: 2, Seq: 3, Kind: "log", Data: json.RawMessage(`"half"`)}}}
	if _, ok := appendJob(nil, plain); !ok {
		t.Fatal("a plain finished job did not take the fast path")
	}
}

// A job read from the table is what json.Unmarshal reads, whichever path reads it, for every
// job the table can hold and for damaged copies of them; and the fast path reads the jobs that
// appendJob writes.
func TestDecodeJobIsUnmarshal(t *testing.T) {
	const seed = 20261125
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	same := func(i int, b []byte) {
		t.Helper()
		want := &Job{}
		werr := json.Unmarshal(b, want)
		got, err := decodeJob(b)
		if (err == nil) != (werr == nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("case %d, %s:\ndecodeJob = %+v, %v\njson.Unmarshal = %+v, %v", i, b, got, err, want, werr)
		}
	}
	fast := 0
	for i := range 20_000 {
		b, err := encodeJob(randomJob(r))
		if err != nil {
			t.Fatal(err)
		}
		same(i, b)
		if _, ok := scanJob(b); ok {
			fast++
		}
		// The same bytes damaged: a byte changed, or cut short, or with a key seen twice.
		bad := bytes.Clone(b)
		const junk = "{}[]\",:0-1en \tx"
		bad[r.IntN(len(bad))] = junk[r.IntN(len(junk))]
		same(i, bad)
		same(i, b[:r.IntN(len(b))])
		same(i, append(bytes.Clone(b[:len(b)-1]), `,"labels":{"k":"v"},"lease":{"attempt":2},"priority":7}`...))
	}
	if fast < 20 {
		t.Fatalf("only %d of 20,000 jobs took the fast path", fast)
	}
	plain := &Job{ID: "01KDVDNAGA4PVZX4VG2DDTS60F", Tenant: "acme", Queue: "q", Type: "t", Payload: json.RawMessage(`{"n":1}`),
		Status: StatusSucceeded, Output: json.RawMessage(`{"ok":true}`), CreatedAt: time.Unix(1_800_000_000, 5).UTC(),
		Labels: map[string]string{"team": "x"}, Lease: &Lease{LeaseID: "l", Nonce: "n", ExpiresAt: time.Unix(1_800_000_030, 0).UTC()},
		Error: &JobError{Code: "c"}, Progress: []Progress{{Number: 2, Seq: 3, Kind: "log", Data: json.RawMessage(`"half"`)}}}
	b, err := encodeJob(plain)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := scanJob(b); !ok || !reflect.DeepEqual(got, plain) {
		t.Fatalf("a plain finished job did not take the fast path: %v %+v", ok, got)
	}
}
