package eventlog_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// FuzzDecodeRecord: any bytes give a record or an error, never a panic; what decodes re-encodes
// to the same bytes, so there is exactly one encoding of each record.
func FuzzDecodeRecord(f *testing.F) {
	good := eventlog.Record{Seq: 7, Time: time.Unix(1700000000, 5).UTC(), Stream: "job/01J", Type: "job.leased", Data: []byte(`{"a":1}`)}
	f.Add(good.Encode())
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add(bytes.Repeat([]byte{0xff}, 80))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := eventlog.DecodeRecord(b)
		if err != nil {
			return
		}
		if got := r.Encode(); !bytes.Equal(got, b) {
			t.Fatalf("decoded record re-encodes differently:\n in  %x\n out %x", b, got)
		}
	})
}

// FuzzDecodePayload: the catalogue decoder never panics on a known type with hostile data, and
// what it decodes without reflection is what encoding/json decodes.
func FuzzDecodePayload(f *testing.F) {
	f.Add("job.submitted", []byte(`{"job_id":"x","payload":{"a":[1,2]}}`))
	f.Add("job.submitted", []byte(`{"job_id":"x","labels":{"a":"b"},"lease_ttl_ms":30000,"priority":-2}`))
	f.Add("job.leased", []byte(`{"job_id":"x","lease_id":"l","nonce":"n","attempt":1,"expires_at":"2026-11-24T09:47:22.655Z"}`))
	f.Add("job.succeeded", []byte(`{"job_id":"x","output":null,"output_hash":"ab"}`))
	f.Add("job.expired", []byte(`{"job_id":"x","reason":"retention"}`))
	f.Add("worker.registered", []byte(`{"queues":null,"labels":{"a":"b"}}`))
	f.Add("tenant.quota_set", []byte(`[]`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		got, err := eventlog.Decode(typ, data)
		want, werr := eventlog.UnmarshalPayload(typ, data)
		if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s %q:\nDecode = %#v, %v\nencoding/json = %#v, %v", typ, data, got, err, want, werr)
		}
	})
}

// FuzzEncodeMatchesMarshal: whatever the encoder without reflection writes is what json.Marshal
// writes for the same event.
func FuzzEncodeMatchesMarshal(f *testing.F) {
	f.Add("job.submitted", []byte(`{"job_id":"x","payload":{"a":[1,2]},"labels":{"b":"1","a":"2"},"result_ttl_ms":5}`))
	f.Add("job.submitted", []byte(`{"job_id":"x<","payload":{"a": "<b>"},"priority":-2}`))
	f.Add("job.leased", []byte(`{"job_id":"x","lease_id":"l","nonce":"n","attempt":1,"expires_at":"2026-11-24T09:47:22.655+01:30"}`))
	f.Add("job.succeeded", []byte(`{"job_id":"x","output":"\u2028","output_hash":"ab","signature":"s"}`))
	f.Add("job.succeeded", []byte(`{"job_id":"\u00e9","output":[1e400]}`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		p, err := eventlog.UnmarshalPayload(typ, data)
		if err != nil {
			return
		}
		got, ok := eventlog.AppendPayload(nil, p)
		if !ok {
			return
		}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("appendPayload wrote %s where json.Marshal fails: %v", got, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("appendPayload %s\njson.Marshal  %s", got, want)
		}
	})
}
