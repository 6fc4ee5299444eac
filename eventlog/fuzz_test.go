package eventlog_test

import (
	"bytes"
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

// FuzzDecodePayload: the catalogue decoder never panics on a known type with hostile data.
func FuzzDecodePayload(f *testing.F) {
	f.Add("job.submitted", []byte(`{"job_id":"x","payload":{"a":[1,2]}}`))
	f.Add("worker.registered", []byte(`{"queues":null,"labels":{"a":"b"}}`))
	f.Add("tenant.quota_set", []byte(`[]`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		_, _ = eventlog.Decode(typ, data)
	})
}
