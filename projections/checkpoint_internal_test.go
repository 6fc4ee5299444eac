package projections

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// WriteCheckpoint streams the jobs, but its bytes are those of encoding/json on the whole
// checkpoint struct, so checkpoints written before it still compare equal.
func TestWriteCheckpointIsTheStructsJSON(t *testing.T) {
	at := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	s := New()
	want := func() []byte {
		c := s.checkpointHead()
		c.Jobs = s.liveJobs()
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	check := func(what string) {
		t.Helper()
		got, err := s.MarshalCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		if w := want(); !bytes.Equal(got, w) {
			t.Fatalf("%s:\n got %s\nwant %s", what, got, w)
		}
	}
	check("the empty Set")
	events := []eventlog.Payload{
		eventlog.TenantQuotaSet{Tenant: "acme", MaxActive: 5},
		eventlog.JobSubmitted{JobID: "j2", Tenant: "acme", Queue: "q", Type: "t", Payload: json.RawMessage(`{"<a>":"&"}`), MaxAttempts: 3, IdempotencyKey: "k"},
		eventlog.JobSubmitted{JobID: "j1", Tenant: "acme", Queue: "q", Type: "t", MaxAttempts: 1},
		eventlog.ReservationMade{Tenant: "acme", ReservationID: "r1", ExpiresAt: at.Add(time.Hour)},
		eventlog.APIKeyCreated{Tenant: "acme", KeyID: "k1", KeyHash: "h"},
	}
	for i, p := range events {
		if err := s.Apply(uint64(i+1), at, p); err != nil {
			t.Fatal(err)
		}
		check(p.EventType())
	}
}
