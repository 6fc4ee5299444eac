package eventlog_test

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/eventlog"
)

func TestCatalogueRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 21, 14, 5, 0, 0, time.UTC)
	samples := []eventlog.Payload{
		eventlog.JobSubmitted{JobID: "01J", Tenant: "acme", Queue: "gpu", Type: "render", Payload: json.RawMessage(`{"frame":1}`),
			Priority: 5, Labels: map[string]string{"zone": "eu"}, MaxAttempts: 3, LeaseTTLMillis: 30000,
			IdempotencyKey: "k1", RequestHash: "ab", ReservationID: "r1", APIKeyID: "key1"},
		eventlog.JobScheduled{JobID: "01J", RunAt: at, Reason: "delay"},
		eventlog.JobLeased{JobID: "01J", LeaseID: "L", WorkerID: "W", SessionID: "S", Nonce: "n", Attempt: 1, ExpiresAt: at},
		eventlog.JobSucceeded{JobID: "01J", LeaseID: "L", Attempt: 1, Output: json.RawMessage(`{"ok":true}`), OutputHash: "cd", Signature: "sig"},
		eventlog.JobFailed{JobID: "01J", LeaseID: "L", Attempt: 1, ErrorCode: "boom", Message: "m", Retryable: true},
		eventlog.JobRetryScheduled{JobID: "01J", Attempt: 1, BackoffMillis: 10000, RunAt: at},
		eventlog.JobDeadLettered{JobID: "01J", Reason: eventlog.DeadLeaseExpired, Attempt: 3},
		eventlog.JobLeaseReleased{JobID: "01J", LeaseID: "L", WorkerID: "W", Attempt: 2, Reason: eventlog.LeaseUndelivered, Message: "m", AttemptSpent: true},
		eventlog.WorkerRegistered{WorkerID: "W", Tenant: "acme", Name: "lab-pc", Queues: []string{"gpu"}, Capacity: 2, TokenHash: "h", ExpiresAt: at},
		eventlog.ReservationMade{Tenant: "acme", ReservationID: "r1", ExpiresAt: at},
		eventlog.EnrollTokenCreated{Tenant: "acme", TokenID: "e", TokenHash: "h", Uses: 5, ExpiresAt: at},
		eventlog.ScheduleCreated{ScheduleID: "S", Tenant: "acme", Name: "nightly", Cron: "30 2 * * *", Timezone: "Europe/Paris",
			Job:     eventlog.JobTemplate{Queue: "gpu", Type: "train", Payload: json.RawMessage(`{"epochs":3}`), MaxAttempts: 3, LeaseTTLMillis: 30000},
			Overlap: eventlog.OverlapSkip, CatchUp: eventlog.CatchUpOne},
		eventlog.ScheduleFired{ScheduleID: "S", Tick: at, JobID: "01J", Late: true},
		eventlog.ScheduleSkipped{ScheduleID: "S", From: at, To: at.Add(time.Hour), Reason: eventlog.SkippedTickMissed, Ticks: 13},
	}
	for _, p := range samples {
		ev, err := eventlog.NewEvent("job/01J", p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := eventlog.Decode(ev.Type, ev.Data)
		if err != nil {
			t.Fatalf("%s: %v", ev.Type, err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("%s round trip:\n got %#v\nwant %#v", ev.Type, got, p)
		}
	}
}

func TestCatalogueIsComplete(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, p := range eventlog.Catalogue() {
		typ := p.EventType()
		if seen[typ] {
			t.Fatalf("event type %q listed twice", typ)
		}
		seen[typ] = true
		ev, err := eventlog.NewEvent("s", p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := eventlog.Decode(typ, ev.Data)
		if err != nil || reflect.TypeOf(got) != reflect.TypeOf(p) {
			t.Fatalf("%s decodes to %T, %v", typ, got, err)
		}
		// Every payload names its entity's stream, whose kind matches its type's prefix.
		if kind, _, _ := strings.Cut(typ, "."); !strings.HasPrefix(p.Stream(), kind+"/") {
			t.Errorf("%s belongs to stream %q", typ, p.Stream())
		}
	}
	for _, typ := range []string{
		"job.submitted", "job.scheduled", "job.leased", "job.lease_extended", "job.progress",
		"job.succeeded", "job.failed", "job.retry_scheduled", "job.lease_expired", "job.dead_lettered",
		"job.cancel_requested", "job.cancelled", "job.redriven",
		"worker.registered", "worker.token_rotated", "worker.revoked", "worker.session_started", "worker.session_ended",
		"worker.expired",
		"tenant.quota_set", "tenant.reservation_made", "tenant.reservation_consumed", "tenant.reservation_released",
		"tenant.reservation_expired", "tenant.api_key_created", "tenant.api_key_revoked",
		"tenant.enroll_token_created", "tenant.enroll_token_used", "tenant.queue_paused", "tenant.queue_resumed", "tenant.key_limit_set",
		"flow.submitted", "flow.step_skipped", "flow.ended", "flow.expired",
		"schedule.created", "schedule.fired", "schedule.skipped", "schedule.paused", "schedule.resumed", "schedule.deleted",
	} {
		if !seen[typ] {
			t.Errorf("the catalogue lacks %q", typ)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	if _, err := eventlog.Decode("job.exploded", []byte(`{}`)); !errors.Is(err, eventlog.ErrUnknownType) {
		t.Fatalf("unknown type: %v, want ErrUnknownType", err)
	}
	if _, err := eventlog.Decode("job.leased", []byte(`{"attempt":"one"}`)); err == nil {
		t.Fatal("a payload of the wrong shape decoded")
	}
	if _, err := eventlog.Decode("job.leased", []byte(`not json`)); err == nil {
		t.Fatal("bytes that are not JSON decoded")
	}
}

// SessionEndReasons lists every Ended* constant of the catalogue: a reason added to the
// catalogue but not to the list would have no close code and pass the test above.
func TestSessionEndReasonsListsEveryEnd(t *testing.T) {
	var ended []string
	for _, group := range catalogueConsts(t) {
		for _, c := range group {
			if strings.HasPrefix(c.name, "Ended") {
				ended = append(ended, c.value)
			}
		}
	}
	if got := eventlog.SessionEndReasons(); !slices.Equal(ended, got) {
		t.Errorf("the catalogue's Ended* constants are %v, SessionEndReasons %v", ended, got)
	}
}

// ServerReleaseReasons lists every constant declared beside LeaseUndelivered, the server's own
// release reasons: one missing from the list would be a reason a worker may give, and that
// the SDKs and the API's description do not say is the server's.
func TestServerReleaseReasonsListsTheGroup(t *testing.T) {
	for _, group := range catalogueConsts(t) {
		var names, values []string
		for _, c := range group {
			names, values = append(names, c.name), append(values, c.value)
		}
		if !slices.Contains(names, "LeaseUndelivered") {
			continue
		}
		if got := eventlog.ServerReleaseReasons(); !slices.Equal(values, got) {
			t.Fatalf("the constants beside LeaseUndelivered are %v (%v), ServerReleaseReasons %v", names, values, got)
		}
		return
	}
	t.Fatal("catalogue.go declares no LeaseUndelivered")
}

type namedConst struct{ name, value string }

// catalogueConsts returns catalogue.go's string constants, group by group (one const
// declaration each), in the order written.
func catalogueConsts(t *testing.T) [][]namedConst {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "catalogue.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var groups [][]namedConst
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		var group []namedConst
		for _, spec := range gen.Specs {
			v := spec.(*ast.ValueSpec)
			for i, name := range v.Names {
				if i < len(v.Values) {
					if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						group = append(group, namedConst{name.Name, strings.Trim(lit.Value, `"`)})
					}
				}
			}
		}
		groups = append(groups, group)
	}
	return groups
}

// TestJobOfAgreesWithStream: JobOf names the job of every event whose stream is a job's, and
// no other: a job event added to the catalogue but not to JobOf would fold as no event at all.
func TestJobOfAgreesWithStream(t *testing.T) {
	for _, p := range eventlog.Catalogue() {
		v := reflect.New(reflect.TypeOf(p)).Elem()
		if f := v.FieldByName("JobID"); f.IsValid() {
			f.SetString("01JOB")
		}
		p = v.Interface().(eventlog.Payload)
		want, isJob := strings.CutPrefix(p.Stream(), eventlog.JobStream(""))
		if !isJob {
			want = ""
		}
		if got, ok := eventlog.JobOf(p); got != want || ok != isJob {
			t.Errorf("%s: JobOf = %q, %v; its stream %q says %q, %v", p.EventType(), got, ok, p.Stream(), want, isJob)
		}
	}
}
