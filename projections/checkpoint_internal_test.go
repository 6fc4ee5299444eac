package projections

import (
	"bytes"
	"encoding/json"
	"reflect"
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

// A checkpoint is written from cloneLive's copy while the Set moves on, so the copy must share
// no map or slice of a tenant with the Set: a key limit set after the copy once leaked into a
// checkpoint that `replay verify` then found differing from the log. Every map and slice field
// of Tenant is checked, so one added without a clone fails here.
func TestCloneLiveSharesNoTenantState(t *testing.T) {
	at := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	s := New()
	for i, p := range []eventlog.Payload{
		eventlog.ReservationMade{Tenant: "acme", ReservationID: "r", ExpiresAt: at.Add(time.Hour)},
		eventlog.QueuePaused{Tenant: "acme", Queue: "q"},
		eventlog.TenantKeyLimitSet{Tenant: "acme", Queue: "q", MaxRunningPerKey: new(1)},
		eventlog.TenantRateLimitSet{Tenant: "acme", Name: "api", Rate: 5, Burst: 5},
		eventlog.JobSubmitted{JobID: "j", Tenant: "acme", Queue: "q", Type: "t", MaxAttempts: 1, RateLimits: []eventlog.RateLimitUse{{Name: "api"}}},
		eventlog.JobLeased{JobID: "j", LeaseID: "l", WorkerID: "w", Attempt: 1, ExpiresAt: at.Add(time.Minute),
			RateGrants: []eventlog.RateGrant{{Name: "api", FullAt: at.Add(time.Second)}}},
	} {
		if err := s.Apply(uint64(i+1), at, p); err != nil {
			t.Fatal(err)
		}
	}
	c := s.cloneLive()
	orig, copied := reflect.ValueOf(*s.tenants["acme"]), reflect.ValueOf(*c.tenants["acme"])
	for i := range orig.NumField() {
		f := orig.Type().Field(i)
		switch f.Type.Kind() {
		case reflect.Map, reflect.Slice, reflect.Pointer:
			if orig.Field(i).IsNil() {
				t.Fatalf("the test sets no %s: give it one", f.Name)
			}
			if orig.Field(i).UnsafePointer() == copied.Field(i).UnsafePointer() {
				t.Errorf("cloneLive shares Tenant.%s with the Set", f.Name)
			}
		}
	}
}
