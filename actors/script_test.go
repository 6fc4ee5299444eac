package actors_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/cockroachdb/datadriven"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/actorstest"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// TestScripts runs the scenarios in testdata/*.txt, one world each: tenant "acme" at t0
// (14:05:00 UTC), nothing else. Each command prints what it caused: the replies and frames
// the parties outside the behaviours received, then the events made durable. Run with
// -rewrite to regenerate the expectations, then read the diff: a wrong expectation recorded
// is a defect.
//
// The commands (jN, lN, wN, fN, scN, rN, kN are the aliases the output gives the ids it meets):
//
//	register w1 [queues=(q,…)] [capacity=N]      a worker of tenant acme
//	revoke w1
//	submit [tenant=T] [nosync] [empty]            one job a line (none: one default job; empty:
//	                                              none at all): queue= type= payload= priority=
//	                                              delay= run-at= attempts= ttl= key= res=
//	                                              result-ttl=
//	connect s1 [worker=w1] [longpoll] [credit=N]  a worker session (then its credit)
//	credit s1 N                                   WebSocket credit
//	offer s1 N | withdraw s1                      a long poll's offer and its end
//	heartbeat s1 [leases=(j1,…)]                  the leases of jobs held (a name that is not a
//	                                              job alias goes as it is)
//	close s1
//	complete j1 [output=JSON] [lease=X] [nonce=X]  with the job's last assignment
//	fail j1 [code=C] [final]                      retryable unless final, as on the wire
//	progress j1 [data=JSON] [seq=N]
//	release j1 [reason=R]                         the worker gives the lease back
//	undelivered j1                                the assignment never reached the worker
//	cancel j1 | retry j1 | delete j1 | purge [queue=q] before=DURATION-AGO
//	pause q | resume q                            a queue
//	quota [max-active=N] [max-running=N]
//	reserve [ttl=D] | unreserve r1
//	flow submit [key=K]                           one step a line: name [needs=(a,b)]
//	                                              [continue] [payload=JSON] [attempts=N]
//	flow cancel f1
//	schedule create [tenant=T]                    input: key: value lines (name, cron, timezone,
//	                                              queue, type, overlap, catch-up)
//	schedule pause sc1 | schedule resume sc1 | schedule delete sc1
//	advance D [heartbeat=s1]                      the clock (s1 heartbeating its leases every
//	                                              HeartbeatInterval)
//	advance D nosync                              the clock, with nothing made durable meanwhile
//	                                              (a slow log): sync makes it so
//	retention [done=D] [dead=D] [max-dead=N]      the dispatcher's retention (it restarts)
//	restart tenant [payload-max=N]|dispatcher|job j1  a supervisor restart: the actor's state is
//	                                              dropped and rebuilt from the log
//	down D                                        the clock moves with no timer run: the
//	                                              server is down (restart tenant then recovers)
//	stall D                                       the clock moves with nothing run, not even the
//	                                              runtime's ticks (a SIGSTOP); then the timers
//	                                              that came due fire, before the next command
//	sync | fail-sync                              what a nosync command left pending
//	show job j1 | show flow f1 | show schedule sc1 | show queue q | show counters q | show tenant
//	show retained                                 how many finished jobs the views keep
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := newScript(t)
		datadriven.RunTest(t, path, s.run)
	})
}

// script is the state of one scenario: its world and the names its output gives.
type script struct {
	t       *testing.T
	w       *actorstest.World
	alias   map[string]string // id → alias
	ids     map[string]string // alias → id
	counts  map[string]int    // alias prefix → last number
	workers map[string]string // worker name → id
	session map[string]string // session → worker id
	last    map[string]actors.Assignment
	parties []string // external names, drained after each command
	mark    int
}

func newScript(t *testing.T) *script {
	return &script{
		t: t, w: actorstest.New(1, t0),
		alias: map[string]string{}, ids: map[string]string{}, counts: map[string]int{},
		workers: map[string]string{}, session: map[string]string{}, last: map[string]actors.Assignment{},
		parties: []string{"client", "worker"},
	}
}

const tenant = "acme"

func (s *script) run(t *testing.T, d *datadriven.TestData) string {
	s.t = t
	if d.Cmd == "show" {
		return s.show(d)
	}
	sync := !d.HasArg("nosync")
	to, msg, from := s.command(d)
	if msg != nil {
		s.w.Send(to, msg, actorstest.External(from))
		if sync {
			s.w.Run()
		} else {
			s.w.Step()
		}
	}
	return s.output()
}

// command decodes d: it either acts itself (and returns a nil msg) or returns a message for
// the world to deliver and the party that sends it.
func (s *script) command(d *datadriven.TestData) (to actors.Ref, msg any, from string) {
	tr := actors.TenantRef(tenant)
	disp := actors.DispatcherRef()
	cmd := d.Cmd
	if cmd == "flow" || cmd == "schedule" || cmd == "show" || cmd == "restart" {
		cmd += " " + s.pos(d, 0)
	}
	switch cmd {
	case "register":
		name := s.pos(d, 0)
		if tn := s.strArg(d, "tenant", tenant); tn != tenant {
			tr = actors.TenantRef(tn)
		}
		queues := []string{"q"}
		if a, ok := d.Arg("queues"); ok {
			queues = a.Vals
		}
		s.parties = append(s.parties, "admin:"+name)
		return tr, actors.RegisterWorker{Tenant: tr.ID, Name: name, Queues: queues, Capacity: s.intArg(d, "capacity", 4),
			TokenHash: "h-" + name, ExpiresAt: t0.Add(7 * 24 * time.Hour)}, "admin:" + name
	case "revoke":
		return tr, actors.RevokeWorker{Tenant: tenant, WorkerID: s.worker(s.pos(d, 0)), By: "admin"}, "client"
	case "submit":
		var specs []actors.JobSpec
		for _, line := range lines(d.Input) {
			specs = append(specs, s.jobSpec(line))
		}
		if len(specs) == 0 && !d.HasArg("empty") {
			specs = append(specs, s.jobSpec(""))
		}
		tn := s.strArg(d, "tenant", tenant)
		return actors.TenantRef(tn), actors.Submit{Tenant: tn, Jobs: specs}, "client"
	case "connect":
		id := s.pos(d, 0)
		wk := s.worker(s.strArg(d, "worker", "w1"))
		s.session[id] = wk
		transport := actors.TransportWebSocket
		if d.HasArg("longpoll") {
			transport = actors.TransportLongPoll
		}
		s.parties = append(s.parties, "connect:"+id, "sink:"+id, "hb:"+id, "poll:"+id)
		s.w.Spawn(actors.SessionRef(id), actors.NewSession(id, actorstest.External("sink:"+id)))
		s.w.Send(actors.SessionRef(id), actors.OpenSession{WorkerID: wk, Transport: transport, Capacity: s.intArg(d, "capacity", 0)},
			actorstest.External("connect:"+id))
		s.w.Run()
		if n := s.intArg(d, "credit", 0); n > 0 {
			return disp, actors.SessionCredit{SessionID: id, N: n}, "sink:" + id
		}
		return
	case "credit":
		id := s.pos(d, 0)
		return disp, actors.SessionCredit{SessionID: id, N: s.posInt(d, 1)}, "sink:" + id
	case "offer":
		id := s.pos(d, 0)
		return actors.SessionRef(id), actors.Offer{N: s.posInt(d, 1)}, "poll:" + id
	case "withdraw":
		id := s.pos(d, 0)
		return actors.SessionRef(id), actors.Withdraw{}, "poll:" + id
	case "heartbeat":
		id := s.pos(d, 0)
		return actors.SessionRef(id), actors.Heartbeat{Leases: s.leases(d)}, "hb:" + id
	case "close":
		id := s.pos(d, 0)
		return actors.SessionRef(id), actors.CloseSession{Reason: "closed"}, "hb:" + id
	case "complete":
		a := s.assignment(d)
		out := s.strArg(d, "output", `{"ok":true}`)
		return disp, actors.Complete{WorkerID: s.holder(d, a), JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(out),
			Signature: s.strArg(d, "signature", "")}, "worker"
	case "fail":
		a := s.assignment(d)
		return disp, actors.Fail{WorkerID: s.holder(d, a), JobID: a.JobID, LeaseID: a.LeaseID, Code: s.strArg(d, "code", "boom"),
			Retryable: !d.HasArg("final")}, "worker"
	case "progress":
		a := s.assignment(d)
		return disp, actors.Progress{WorkerID: s.holder(d, a), JobID: a.JobID, LeaseID: a.LeaseID, Kind: "log",
			Data: json.RawMessage(s.strArg(d, "data", `"line"`)), Seq: s.intArg(d, "seq", 0)}, "worker"
	case "release":
		a := s.assignment(d)
		return disp, actors.ReleaseLease{WorkerID: s.holder(d, a), JobID: a.JobID, LeaseID: a.LeaseID, Reason: s.strArg(d, "reason", "worker_stopping")}, "worker"
	case "undelivered":
		a := s.assignment(d)
		return disp, actors.Undelivered{JobID: a.JobID, LeaseID: a.LeaseID}, "worker"
	case "cancel":
		return disp, actors.Cancel{Tenant: s.strArg(d, "tenant", tenant), JobID: s.id(s.pos(d, 0))}, "client"
	case "retry":
		return tr, actors.Redrive{Tenant: tenant, JobID: s.id(s.pos(d, 0))}, "client"
	case "delete":
		return disp, actors.Delete{Tenant: tenant, JobID: s.id(s.pos(d, 0))}, "client"
	case "purge":
		return disp, actors.PurgeDead{Tenant: tenant, Queue: s.strArg(d, "queue", ""), Before: s.w.Clock.Add(-s.durArg(d, "before", 0))}, "client"
	case "pause", "resume":
		return disp, actors.PauseQueue{Tenant: tenant, Queue: s.pos(d, 0), Paused: cmd == "pause"}, "client"
	case "explain":
		return disp, actors.Explain{Tenant: tenant, JobID: s.id(s.pos(d, 0))}, "client"
	case "keylimit": // keylimit [QUEUE] [n=N]: no n clears
		m := actors.SetKeyLimit{Tenant: tenant}
		if len(d.CmdArgs) > 0 && d.CmdArgs[0].Vals == nil {
			m.Queue = d.CmdArgs[0].Key
		}
		if d.HasArg("n") {
			m.MaxRunningPerKey = new(s.intArg(d, "n", 0))
		}
		return disp, m, "client"
	case "ratelimit": // ratelimit NAME rate=R burst=B, or ratelimit NAME delete
		if d.HasArg("delete") {
			return disp, actors.DeleteRateLimit{Tenant: tenant, Name: s.pos(d, 0)}, "client"
		}
		rate, err := strconv.ParseFloat(s.strArg(d, "rate", "1"), 64)
		if err != nil {
			s.t.Fatal(err)
		}
		return disp, actors.SetRateLimit{Tenant: tenant, Name: s.pos(d, 0), Rate: rate, Burst: s.intArg(d, "burst", 1)}, "client"
	case "quota":
		q := actors.SetQuota{Tenant: tenant}
		if d.HasArg("max-active") {
			n := s.intArg(d, "max-active", 0)
			q.MaxActive = &n
		}
		if d.HasArg("max-running") {
			n := s.intArg(d, "max-running", 0)
			q.MaxRunning = &n
		}
		return tr, q, "client"
	case "reserve":
		return tr, actors.Reserve{Tenant: tenant, TTL: s.durArg(d, "ttl", 0)}, "client"
	case "unreserve":
		return tr, actors.Release{Tenant: tenant, ID: s.id(s.pos(d, 0))}, "client"
	case "flow submit":
		var steps []actors.FlowStepSpec
		for _, line := range lines(d.Input) {
			steps = append(steps, s.flowStep(line))
		}
		return tr, actors.SubmitFlow{Tenant: tenant, Name: "demo", Steps: steps, IdempotencyKey: s.strArg(d, "key", "")}, "client"
	case "flow cancel":
		return tr, actors.CancelFlow{Tenant: tenant, FlowID: s.id(s.pos(d, 1))}, "client"
	case "schedule create":
		tn := s.strArg(d, "tenant", tenant)
		return actors.TenantRef(tn), actors.CreateSchedule{Tenant: tn, Spec: s.scheduleSpec(d.Input)}, "client"
	case "schedule pause", "schedule resume":
		return tr, actors.PauseSchedule{Tenant: tenant, ID: s.id(s.pos(d, 1)), Paused: cmd == "schedule pause"}, "client"
	case "schedule delete":
		return tr, actors.DeleteSchedule{Tenant: tenant, ID: s.id(s.pos(d, 1))}, "client"
	case "advance":
		if d.HasArg("nosync") {
			s.w.AdvanceUnsynced(s.posDur(d, 0))
			return
		}
		s.advance(s.posDur(d, 0), s.strArg(d, "heartbeat", ""))
		return
	case "restart tenant":
		// A restarted tenant recovers before its next message; a starting server wakes it
		// (actors.ResumedRefs). A pause of no schedule is a message it answers without an event.
		s.w.Restart(tr, actors.NewTenant(tenant, actors.Limits{PayloadBytesMax: s.intArg(d, "payload-max", 0)}))
		s.w.Call("restart", tr, actors.PauseSchedule{Tenant: tenant, ID: "none"})
		return
	case "retention":
		s.w.Retention = projections.Retention{Done: s.durArg(d, "done", 0), Dead: s.durArg(d, "dead", 0), MaxDead: s.intArg(d, "max-dead", 0)}
		s.w.Restart(disp, actors.NewDispatcher(s.w.Retention))
		s.w.Run()
		return
	case "restart dispatcher":
		s.w.Restart(disp, actors.NewDispatcher(s.w.Retention))
		s.w.Run()
		return
	case "restart job":
		id := s.id(s.pos(d, 1))
		s.w.Restart(actors.JobRef(id), actors.NewJob(id))
		s.w.Run()
		return
	case "down":
		s.w.Clock = s.w.Clock.Add(s.posDur(d, 0))
		return
	case "stall":
		s.w.Stall(s.posDur(d, 0))
		return
	case "sync":
		s.w.Run()
		return
	case "fail-sync":
		s.w.FailSync(fmt.Errorf("fsync: input/output error"))
		s.w.Run()
		return
	case "show job", "show flow", "show schedule", "show queue", "show counters", "show tenant", "show retained":
		return
	}
	s.t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return
}

// advance moves the clock by total; if session is set, the session heartbeats every
// HeartbeatInterval, naming the leases it holds, as a worker does.
func (s *script) advance(total time.Duration, session string) {
	if session == "" {
		s.w.Advance(total)
		return
	}
	for total > 0 {
		step := min(total, actors.HeartbeatInterval)
		s.w.Advance(step)
		var leases []string
		for _, j := range s.w.Set.Leases() {
			if j.Lease.SessionID == session {
				leases = append(leases, j.Lease.LeaseID)
			}
		}
		s.w.Call("hb:"+session, actors.SessionRef(session), actors.Heartbeat{Leases: leases})
		total -= step
	}
}

// output prints what the last command caused: replies and frames by party, then events.
func (s *script) output() string {
	var b strings.Builder
	for _, p := range s.parties {
		for _, m := range s.w.Inbox(p) {
			switch m := m.(type) {
			case actors.Assignment:
				s.last[m.JobID] = m
			case actors.Registered:
				if m.Err == nil {
					s.workers[strings.TrimPrefix(p, "admin:")] = m.WorkerID
				}
			}
			fmt.Fprintf(&b, "%s: %s\n", p, s.format(m))
		}
	}
	s.w.Inbox("restart")
	for _, r := range s.w.Log[s.mark:] {
		fmt.Fprintf(&b, "%d %s\n", r.Seq, s.event(r.Payload))
	}
	s.mark = len(s.w.Log)
	return b.String()
}

func (s *script) show(d *datadriven.TestData) string {
	switch s.pos(d, 0) {
	case "job":
		j, ok := s.w.Set.Job(s.id(s.pos(d, 1)))
		if !ok {
			return "no such job\n"
		}
		out := fmt.Sprintf("status=%s attempt=%d run_at=%s events=%d releases=%d", j.StatusAt(s.w.Clock), j.Attempt, s.clock(j.RunAt), j.Events, j.Releases)
		if j.Error != nil {
			out += " error=" + j.Error.Code
		}
		return out + "\n"
	case "flow":
		f, ok := s.w.Set.Flow(s.id(s.pos(d, 1)))
		if !ok {
			return "no such flow\n"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "status=%s\n", f.Status)
		for _, name := range slices.Sorted(maps.Keys(f.State)) {
			st := f.State[name]
			fmt.Fprintf(&b, "  %s: %s\n", name, strings.TrimSpace(st.Status+" "+s.name(st.JobID, "j")))
		}
		return b.String()
	case "schedule":
		c, ok := s.w.Set.Schedule(s.id(s.pos(d, 1)))
		if !ok {
			return "no such schedule\n"
		}
		return fmt.Sprintf("paused=%t fired=%d last_tick=%s next=%s\n", c.Paused, c.Fired, s.clock(c.LastTick), s.clock(actors.NextTick(c, s.w.Clock)))
	case "queue":
		if p, ok := s.w.Set.Paused(tenant, s.pos(d, 1)); ok {
			return fmt.Sprintf("paused since seq %d\n", p.Seq)
		}
		return "not paused\n"
	case "retained":
		return fmt.Sprintf("%d\n", s.w.Set.RetainedCount())
	case "counters":
		return s.format(s.w.Set.Counters()[s.pos(d, 1)]) + "\n"
	case "tenant":
		tn := s.w.Set.Tenant(tenant)
		out := fmt.Sprintf("active=%d reservations=%d max_running_per_key=%d queue_key_limits=%v\n", tn.Active, len(tn.Reservations),
			tn.MaxRunningPerKey, tn.QueueKeyLimits)
		for _, name := range slices.Sorted(maps.Keys(tn.RateLimits)) {
			l := tn.RateLimits[name]
			out += fmt.Sprintf("rate limit %s: rate=%v burst=%d\n", name, l.Rate, l.Burst)
		}
		for _, b := range slices.Sorted(maps.Keys(tn.RateBuckets)) {
			out += fmt.Sprintf("bucket %s: full at %s\n", b, tn.RateBuckets[b].Format("15:04:05.000"))
		}
		return out
	}
	return ""
}

// event prints a payload: its type, its stream and its fields that are set, but the one its
// stream names.
func (s *script) event(p eventlog.Payload) string {
	stream := p.Stream()
	kind, id, _ := strings.Cut(stream, "/")
	prefix := map[string]string{"job": "j", "worker": "w", "flow": "f", "schedule": "sc"}[kind]
	if prefix != "" {
		id = s.name(id, prefix)
	}
	return p.EventType() + " " + kind + "/" + id + s.fields(reflect.ValueOf(p), stream[len(kind)+1:])
}

// format prints a reply or a frame: its type and its fields that are set.
func (s *script) format(m any) string {
	v := reflect.ValueOf(m)
	return v.Type().Name() + s.fields(v, "")
}

func (s *script) fields(v reflect.Value, skip string) string {
	var b strings.Builder
	for i := range v.NumField() {
		f := v.Type().Field(i)
		fv := v.Field(i)
		if !f.IsExported() || fv.IsZero() || quiet[f.Name] {
			continue
		}
		if v.Type() == reflect.TypeFor[eventlog.FlowStep]() && f.Name == "JobTemplate" {
			continue // each step's job.submitted shows it
		}
		if v.Type() == reflect.TypeFor[actors.SubmittedJob]() && f.Name == "Job" {
			continue // a submit's job snapshot repeats its job.submitted
		}
		if fv.Kind() == reflect.String && fv.String() == skip {
			continue
		}
		name := f.Name
		if p, ok := idOf[v.Type().Name()]; ok && name == "ID" {
			name = p
		}
		fmt.Fprintf(&b, " %s=%s", snake(f.Name), s.value(name, fv))
	}
	return b.String()
}

// idOf names what the ID field of a reply type holds.
var idOf = map[string]string{"SubmittedJob": "JobID", "Reserved": "ReservationID", "ScheduleMade": "ScheduleID", "Created": "KeyID"}

// quiet fields are left out: hashes and digests that say nothing a reader checks, and a
// submit's job snapshots, which repeat its job.submitted.
var quiet = map[string]bool{"RequestHash": true, "SpecHash": true, "Hash": true, "YAMLSHA256": true}

func (s *script) value(field string, v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Time:
		return s.clock(x)
	case time.Duration:
		return x.String()
	case json.RawMessage:
		return string(x)
	case actors.Receipt:
		return strconv.FormatUint(x.Seq, 10)
	case *actors.Rejection:
		msg := x.Message
		for id, a := range s.alias {
			msg = strings.ReplaceAll(msg, id, a)
		}
		var details []string
		for k, v := range x.Details {
			details = append(details, fmt.Sprintf("%s=%v", k, s.name(fmt.Sprint(v), aliasPrefix(k))))
		}
		if len(details) > 0 {
			slices.Sort(details)
			msg += "; " + strings.Join(details, " ")
		}
		return fmt.Sprintf("%s(%s)", x.Code, msg)
	case string:
		if strings.HasSuffix(field, "Hash") && len(x) > 8 {
			return x[:8]
		}
		return s.name(x, aliasPrefix(field))
	}
	switch v.Kind() {
	case reflect.Pointer:
		return s.value(field, v.Elem())
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = s.value(field, v.Index(i))
		}
		return "(" + strings.Join(parts, ",") + ")"
	case reflect.Map:
		var parts []string
		for _, k := range v.MapKeys() {
			parts = append(parts, fmt.Sprint(k.Interface())+":"+s.value(field, v.MapIndex(k)))
		}
		slices.Sort(parts)
		return "{" + strings.Join(parts, ",") + "}"
	case reflect.Struct:
		return "{" + strings.TrimSpace(s.fields(v, "")) + "}"
	}
	return fmt.Sprint(v.Interface())
}

// aliasPrefix is the alias prefix of an id held in the named field; "" for a field that holds
// no generated id.
func aliasPrefix(field string) string {
	field = strings.TrimSuffix(field, "s")
	switch {
	case strings.HasSuffix(field, "JobID"), field == "Job", field == "job_id":
		return "j"
	case strings.HasSuffix(field, "LeaseID"), field == "Lease", field == "CancelRequested", field == "Unknown":
		return "l"
	case field == "Nonce":
		return "n"
	case field == "WorkerID":
		return "w"
	case field == "FlowID":
		return "f"
	case field == "ScheduleID", field == "schedule_id":
		return "sc"
	case field == "ReservationID":
		return "r"
	case strings.HasSuffix(field, "KeyID"), field == "EnrollTokenID":
		return "k"
	}
	return ""
}

// name returns the alias of a generated id, giving it one with prefix when it has none; other
// strings are printed as they are.
func (s *script) name(id, prefix string) string {
	if a, ok := s.alias[id]; ok {
		return a
	}
	if prefix == "" || len(id) < 20 {
		return id
	}
	s.counts[prefix]++
	a := prefix + strconv.Itoa(s.counts[prefix])
	s.alias[id], s.ids[a] = a, id
	return a
}

// id returns the id an alias names, or the argument itself.
func (s *script) id(alias string) string {
	if id, ok := s.ids[alias]; ok {
		return id
	}
	return alias
}

func (s *script) clock(t time.Time) string {
	switch {
	case t.IsZero():
		return "-"
	case t.YearDay() == t0.YearDay() && t.Year() == t0.Year():
		return t.UTC().Format("15:04:05.999")
	}
	return t.UTC().Format("01-02T15:04:05.999")
}

func (s *script) worker(name string) string {
	if id, ok := s.workers[name]; ok {
		return id
	}
	if id, ok := s.ids[name]; ok {
		return id
	}
	return name
}

// holder is the worker named worker=, or else the one that holds a's lease.
func (s *script) holder(d *datadriven.TestData, a actors.Assignment) string {
	if name := s.strArg(d, "worker", ""); name != "" {
		return s.worker(name)
	}
	j, ok := s.w.Set.Job(a.JobID)
	if ok && j.Lease != nil {
		return j.Lease.WorkerID
	}
	return s.ids["w1"]
}

// assignment is the last assignment of job pos 0, with lease= and nonce= overriding its own.
func (s *script) assignment(d *datadriven.TestData) actors.Assignment {
	id := s.id(s.pos(d, 0))
	a, ok := s.last[id]
	if !ok {
		a = actors.Assignment{JobID: id}
	}
	a.LeaseID = s.id(s.strArg(d, "lease", a.LeaseID))
	a.Nonce = s.strArg(d, "nonce", a.Nonce)
	return a
}

func (s *script) leases(d *datadriven.TestData) []string {
	a, ok := d.Arg("leases")
	if !ok {
		return nil
	}
	var out []string
	for _, v := range a.Vals {
		if as, ok := s.last[s.id(v)]; ok {
			out = append(out, as.LeaseID)
		} else {
			out = append(out, v)
		}
	}
	return out
}

func (s *script) jobSpec(line string) actors.JobSpec {
	spec := actors.JobSpec{Queue: "q", Type: "t"}
	texts := map[string]*string{"queue": &spec.Queue, "type": &spec.Type, "key": &spec.IdempotencyKey, "ckey": &spec.ConcurrencyKey}
	numbers := map[string]*int{"priority": &spec.Priority, "attempts": &spec.MaxAttempts}
	durations := map[string]*time.Duration{"delay": &spec.Delay, "ttl": &spec.LeaseTTL, "result-ttl": &spec.ResultTTL}
	for k, v := range keyValues(line) {
		switch {
		case texts[k] != nil:
			*texts[k] = v
		case numbers[k] != nil:
			*numbers[k] = s.atoi(v)
		case durations[k] != nil:
			*durations[k] = s.dur(v)
		case k == "payload":
			spec.Payload = json.RawMessage(v)
		case k == "run-at":
			spec.RunAt = t0.Add(s.dur(v))
		case k == "res":
			spec.ReservationID = s.id(v)
		case k == "rates": // rates=NAME[:KEY],...
			for _, r := range strings.Split(v, ",") {
				name, key, _ := strings.Cut(r, ":")
				spec.RateLimits = append(spec.RateLimits, eventlog.RateLimitUse{Name: name, Key: key})
			}
		default:
			s.t.Fatalf("job spec: unknown key %q", k)
		}
	}
	return spec
}

func (s *script) flowStep(line string) actors.FlowStepSpec {
	name, rest, _ := strings.Cut(line, " ")
	st := actors.FlowStepSpec{Name: name, Job: actors.JobSpec{Queue: "q", Type: name}}
	for k, v := range keyValues(rest) {
		switch k {
		case "needs":
			st.Needs = strings.Split(strings.Trim(v, "()"), ",")
		case "continue":
			st.ContinueOnFailure = true
		case "payload":
			st.Job.Payload = json.RawMessage(v)
		case "attempts":
			st.Job.MaxAttempts = s.atoi(v)
		default:
			s.t.Fatalf("flow step: unknown key %q", k)
		}
	}
	return st
}

func (s *script) scheduleSpec(input string) actors.ScheduleSpec {
	spec := actors.ScheduleSpec{Name: "nightly", Job: actors.JobSpec{Queue: "q", Type: "report"}}
	for _, line := range lines(input) {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "name":
			spec.Name = v
		case "cron":
			spec.Cron = v
		case "timezone":
			spec.Timezone = v
		case "queue":
			spec.Job.Queue = v
		case "type":
			spec.Job.Type = v
		case "overlap":
			spec.Overlap = v
		case "catch-up":
			spec.CatchUp = v
		default:
			s.t.Fatalf("schedule: unknown key %q", k)
		}
	}
	return spec
}

// keyValues splits "a=1 b c=x" into a=1, b="", c=x.
func keyValues(line string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out
}

func lines(input string) []string {
	var out []string
	for _, l := range strings.Split(input, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// pos is the i-th argument without a value (connect s1: "s1").
func (s *script) pos(d *datadriven.TestData, i int) string {
	n := 0
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 && a.Key != "nosync" && a.Key != "longpoll" && a.Key != "final" {
			if n == i {
				return a.Key
			}
			n++
		}
	}
	s.t.Fatalf("%s: %s needs argument %d", d.Pos, d.Cmd, i+1)
	return ""
}

func (s *script) posInt(d *datadriven.TestData, i int) int           { return s.atoi(s.pos(d, i)) }
func (s *script) posDur(d *datadriven.TestData, i int) time.Duration { return s.dur(s.pos(d, i)) }

func (s *script) strArg(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return def
}

func (s *script) intArg(d *datadriven.TestData, key string, def int) int {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return s.atoi(a.Vals[0])
	}
	return def
}

func (s *script) durArg(d *datadriven.TestData, key string, def time.Duration) time.Duration {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return s.dur(a.Vals[0])
	}
	return def
}

func (s *script) atoi(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

func (s *script) dur(v string) time.Duration {
	d, err := time.ParseDuration(v)
	if err != nil {
		s.t.Fatal(err)
	}
	return d
}

// snake turns a Go field name into the words of the wire (JobID: job_id).
func snake(name string) string {
	var b strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
