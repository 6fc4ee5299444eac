package eventlog_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/schematest"
)

// The events every job has decode without reflection exactly as encoding/json decodes them:
// random ones as the server writes them, and damaged copies of each (a changed byte, a cut, a
// key seen twice or cased differently), which must fail or differ the same way.
func TestDecodeIsUnmarshal(t *testing.T) {
	t.Parallel()
	const seed = 20261124
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed))
	word := func() string {
		const plain, escaped = "abcXYZ019-_./é", "\\\"\t<"
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = plain[r.IntN(len(plain))]
			if r.IntN(60) == 0 {
				b[i] = escaped[r.IntN(len(escaped))]
			}
		}
		return string(b)
	}
	at := func() time.Time { return time.Unix(1_790_000_000+r.Int64N(1e8), r.Int64N(1e9)).UTC() }
	random := func() eventlog.Payload {
		switch r.IntN(4) {
		case 0:
			e := eventlog.JobSubmitted{JobID: word(), Tenant: word(), Queue: word(), Type: word(), Priority: r.IntN(200) - 100,
				MaxAttempts: r.IntN(10), LeaseTTLMillis: r.Int64N(1e7), IdempotencyKey: word(), RequestHash: word(),
				ReservationID: word(), APIKeyID: word(), ResultTTLMillis: r.Int64N(1e7), FlowID: word(), FlowStep: word(), ScheduleID: word(), ConcurrencyKey: word(), Traceparent: word()}
			if r.IntN(2) == 0 {
				e.Payload = json.RawMessage(fmt.Sprintf(`{"n":%d,"s":[1,"x",null]}`, r.IntN(1000)))
			}
			if r.IntN(3) == 0 {
				e.Labels = map[string]string{word(): word(), word(): word()}
			}
			for range r.IntN(3) {
				e.RateLimits = append(e.RateLimits, eventlog.RateLimitUse{Name: word(), Key: word()})
			}
			return e
		case 1:
			e := eventlog.JobLeased{JobID: word(), LeaseID: word(), WorkerID: word(), SessionID: word(), Nonce: word(),
				Attempt: r.IntN(10), ExpiresAt: at()}
			for range r.IntN(3) {
				e.RateGrants = append(e.RateGrants, eventlog.RateGrant{Name: word(), Key: word(), FullAt: at()})
			}
			return e
		case 2:
			e := eventlog.JobSucceeded{JobID: word(), LeaseID: word(), Attempt: r.IntN(10), OutputHash: word(), Signature: word()}
			if r.IntN(2) == 0 {
				e.Output = json.RawMessage(`{"ok":true}`)
			}
			return e
		default:
			return eventlog.JobExpired{JobID: word(), Reason: word(), APIKeyID: word()}
		}
	}
	same := func(i int, typ string, b []byte) {
		t.Helper()
		got, err := eventlog.Decode(typ, b)
		want, werr := eventlog.UnmarshalPayload(typ, b)
		if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d, %s %s:\nDecode = %#v, %v\nencoding/json = %#v, %v", i, typ, b, got, err, want, werr)
		}
	}
	fast := 0
	drawn := map[reflect.Type][]reflect.Value{}
	for i := range 20_000 {
		p := random()
		drawn[reflect.TypeOf(p)] = append(drawn[reflect.TypeOf(p)], reflect.ValueOf(p))
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		typ := p.EventType()
		same(i, typ, b)
		if _, ok := eventlog.ScanPayload(typ, b); ok {
			fast++
		}
		bad := bytes.Clone(b)
		const junk = "{}[]\",:0-1en \tx"
		bad[r.IntN(len(bad))] = junk[r.IntN(len(junk))]
		same(i, typ, bad)
		same(i, typ, b[:r.IntN(len(b))])
		same(i, typ, append(bytes.Clone(b[:len(b)-1]), `,"job_id":"again","Attempt":3,"labels":{"k":"v"}}`...))
		same(i, typ, append(bytes.Clone(b[:len(b)-1]), `,"JOB_ID":"cased"}`...))
	}
	if fast < 200 {
		t.Fatalf("only %d of 20,000 events took the path without reflection", fast)
	}
	// The draw covers every event the decoder without reflection takes, with every field set
	// now and then: a field it never sets would go untested.
	for _, p := range eventlog.Catalogue() {
		if _, ok := eventlog.ScanPayload(p.EventType(), []byte(`{}`)); !ok {
			continue
		}
		rt := reflect.TypeOf(p)
		if len(drawn[rt]) == 0 {
			t.Errorf("random never draws a %s", p.EventType())
		} else if unset := schematest.UnsetOf(rt, drawn[rt]); len(unset) > 0 {
			t.Errorf("random never sets %s's %v", p.EventType(), unset)
		}
	}
	// What the server writes for a no-op job takes it.
	for _, b := range []string{
		`{"job_id":"01M86F6YBEWB6CAA7V165W7T06","tenant":"default","queue":"bench","type":"noop","payload":{"sent":1795513612654150279},"priority":0,"max_attempts":5,"lease_ttl_ms":30000}`,
		`{"job_id":"01M86F6YBEWB6CAA7V165W7T06","lease_id":"01M86F6YBFTD7KZFESV0ADPACX","worker_id":"01M86F5CDRT0W2CHE5S3WGNA1N","session_id":"s_9d4c","nonce":"b127","attempt":1,"expires_at":"2026-11-24T09:47:22.655275528Z"}`,
		`{"job_id":"01M86F6YBCT811C5KWX15NDXSF","lease_id":"01M86F6YBDSRBQW1DESYHA7DMA","attempt":1,"output":null,"output_hash":"7423"}`,
		`{"job_id":"01M86F6YBCT811C5KWX15NDXSF","reason":"retention"}`,
	} {
		var typ string
		switch {
		case bytes.Contains([]byte(b), []byte("tenant")):
			typ = "job.submitted"
		case bytes.Contains([]byte(b), []byte("expires_at")):
			typ = "job.leased"
		case bytes.Contains([]byte(b), []byte("output")):
			typ = "job.succeeded"
		default:
			typ = "job.expired"
		}
		if _, ok := eventlog.ScanPayload(typ, []byte(b)); !ok {
			t.Errorf("%s %s did not take the path without reflection", typ, b)
		}
		same(-1, typ, []byte(b))
	}
}
