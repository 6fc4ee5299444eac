package actors

import (
	"strings"
	"testing"
	"time"
)

// TestTenantInvariantsFail breaks each part's invariant by hand: CheckInvariants must name it.
// (The simulator's release_twice mutant breaks intake's from the outside.)
func TestTenantInvariantsFail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		breaks func(*Tenant)
		want   string
	}{
		{"a pipeline count below 0", func(tn *Tenant) { tn.pipe.pending = -1 }, "pipeline"},
		{"a released reservation still held", func(tn *Tenant) {
			tn.intake.reservations["r1"] = reservation{expiresAt: time.Unix(1, 0)}
			tn.intake.ending["r1"] = true
		}, "intake: reservation r1 is held, but its end is decided"},
		{"a pending key with no pending job", func(tn *Tenant) { tn.intake.pendingIdem["k"] = pendingKey{jobID: "j1"} }, "intake: 0 jobs pending"},
		{"an enroll use no registration spends", func(tn *Tenant) { tn.creds.pendingEnroll["e1"] = 1 }, "credentials:"},
		{"a registration whose use is not counted", func(tn *Tenant) { tn.creds.registering["w1"] = "e1" }, "credentials:"},
		{"flow jobs pending with no decision", func(tn *Tenant) { tn.flows.pendingJobs = 1 }, "flows: 1 jobs pending"},
		{"a flow to read again that is not busy", func(tn *Tenant) { tn.flows.again["f1"] = true }, "flows: flow f1"},
		{"schedule jobs pending with no decision", func(tn *Tenant) { tn.schedules.pendingJobs = 1 }, "schedules: 1 jobs pending"},
		{"a create not in flight", func(tn *Tenant) { tn.schedules.names["n"] = "s1" }, "schedules: schedule n (s1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := NewTenant("acme", Limits{})
			tn.intake.reset()
			tn.creds.reset()
			tn.flows.reset()
			tn.schedules.reset()
			if err := tn.CheckInvariants(); err != nil {
				t.Fatalf("a fresh tenant: %v", err)
			}
			tc.breaks(tn)
			if err := tn.CheckInvariants(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckInvariants() = %v, want %q", err, tc.want)
			}
		})
	}
}
