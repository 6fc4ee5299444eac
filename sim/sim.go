package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/actors/cells"
	"github.com/tetherhq/tether/projections"
)

// Fault is a class of injected fault. Each class draws from its own random stream, so turning
// one off (Config.Off, --shrink) does not shift when the others strike.
type Fault int

// The fault classes.
const (
	FaultDrop        Fault = iota // a message is lost
	FaultDelay                    // a message takes up to seconds
	FaultReorder                  // a message is overtaken by later ones (jitter)
	FaultDup                      // a message arrives twice
	FaultPartition                // a client or worker is cut off from the server for a while
	FaultWorkerCrash              // a worker dies, forgets its jobs, and comes back later
	FaultPause                    // a worker stops past its lease, then goes on as if nothing happened
	FaultMisbehave                // a worker sends a stale lease, a reused nonce, a bad signature or another tenant's job
	FaultServerCrash              // the server dies: at any step, mid-commit (unsynced data), after a commit before its replies, or while recovering
	FaultDisk                     // a WAL write or fsync fails, which stops the server
	FaultClock                    // the server's clock jumps forward or back
	FaultArchive                  // an archiving step meets a disk error (full, I/O) or a crash in the middle; segments lost, swapped or moved away while the server is down
	// FaultLeader, on a replicated log: the leader paused (frozen for up to three TTLs, then
	// going on with everything it had in flight), or cut off from NATS (its requests held and
	// delivered late when the cut heals), the stream or the election's bucket answering nothing
	// while it elects a raft leader, and lost requests and answers, the renewals' among them.
	FaultLeader
	// FaultCheckpoint: the machine stops in the middle of a checkpoint's save, at one of the
	// operations on the tables it writes and Pebble takes in (their writes, syncs and closes,
	// the reads and links of the ingestion).
	FaultCheckpoint
	// FaultStall: the server process stops for a while (a SIGSTOP, a frozen VM, a long pause),
	// from a moment to several lease_ttls, and goes on as if nothing happened (stall.go).
	FaultStall
	faultClasses
)

var faultNames = [faultClasses]string{"drop", "delay", "reorder", "dup", "partition", "worker-crash", "pause", "misbehave", "crash", "disk", "clock", "archive", "leader", "checkpoint", "stall"}

func (f Fault) String() string { return faultNames[f] }

// ParseFaults reads a comma-separated list of fault class names; "all" names every class.
func ParseFaults(list string) ([]Fault, error) {
	var out []Fault
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if name == "all" {
			for f := range faultClasses {
				out = append(out, f)
			}
			continue
		}
		i := slices.Index(faultNames[:], name)
		if i < 0 {
			return nil, fmt.Errorf("unknown fault class %q (one of %s, or all)", name, strings.Join(faultNames[:], ", "))
		}
		out = append(out, Fault(i))
	}
	return out, nil
}

// Probe counts a rare path the run went through. Over a range of seeds every probe should be
// hit; one that never is marks a path the simulator does not reach.
type Probe int

// The probes.
const (
	ProbeStaleLeaseRejected Probe = iota
	ProbeCrashBeforeReply
	ProbeIdempotentAfterCrash
	ProbeQuotaFull
	ProbeLeaseExpiredWorkerAlive
	ProbeCancelWhileLeased
	ProbeNonceReplayRejected
	ProbeRecoveryCrash
	ProbeBadSignatureRejected
	ProbeForeignJobRejected
	ProbeUnsyncedSurvived
	ProbeRedrive
	ProbeUndeliveredReturned
	ProbeCleanStopReleased
	ProbeTokenRenewed
	ProbeExpired
	ProbeDeleted
	ProbeCrashMidCheckpoint
	ProbeCrashInCheckpointSave
	ProbeStoredJobChanged
	ProbeArchived
	ProbeArchiveFault
	ProbeCrashMidArchive
	ProbeQueuePaused
	ProbeFlowAdvanced
	ProbeFlowFailed
	ProbeFlowExpired
	ProbeScheduleFired
	ProbeScheduleLate
	ProbeDeposedAppendRefused
	ProbeDeposedPublishArrived
	ProbeLostAnswer
	ProbeLeadReadBack
	ProbeLeaderPaused
	ProbeTakeover
	ProbeArchiveDamaged
	ProbeKeyLimitReached
	ProbeRateLimitFull
	ProbeCompletedAfterCancel
	ProbeWorkerExpired
	ProbeServerStalled
	ProbeStallGrace
	ProbeUnacknowledgedReleased
	probeCount
)

var probeNames = [probeCount]string{"stale_lease_rejected", "crash_between_append_and_reply", "idempotent_resubmit_after_crash",
	"quota_full", "lease_expired_worker_alive", "cancel_while_leased", "nonce_replay_rejected", "recovery_crash",
	"bad_signature_rejected", "foreign_job_rejected", "unsynced_tail_survived", "redrive", "undelivered_assignment_returned",
	"clean_stop_released", "token_renewed", "job_expired", "job_deleted", "crash_mid_checkpoint", "crash_in_checkpoint_save", "stored_job_changed",
	"archived", "archive_fault", "crash_mid_archive", "queue_paused", "flow_advanced", "flow_failed",
	"flow_expired", "schedule_fired", "schedule_fired_late",
	"deposed_append_refused", "deposed_publish_arrived", "lost_answer", "lead_read_back", "leader_paused", "takeover", "archive_damaged",
	"key_limit_reached", "rate_limit_full", "completed_after_cancel", "worker_expired",
	"server_stalled", "stall_grace", "unacknowledged_released"}

func (p Probe) String() string { return probeNames[p] }

// Probes lists every probe.
func Probes() []Probe {
	out := make([]Probe, probeCount)
	for i := range out {
		out[i] = Probe(i)
	}
	return out
}

// Config is one run.
type Config struct {
	Seed uint64
	// Steps is the length of the safety phase, in steps (a message handled, a delivery, a
	// timer, a commit, a fault). Heal and liveness follow until every job is terminal.
	Steps int
	// Off lists fault classes turned off.
	Off []Fault
	// Trace, if set, gets every step as a line of text.
	Trace io.Writer
}

// Violation is a broken invariant.
type Violation struct {
	Invariant string
	Step      int
	Detail    string
	Tail      []string // the last steps before it
}

func (v *Violation) Error() string {
	return fmt.Sprintf("invariant %q broken at step %d: %s", v.Invariant, v.Step, v.Detail)
}

// Result is what a run did.
type Result struct {
	Config      Config
	Steps       int
	VirtualTime time.Duration
	Faults      [faultClasses]int
	Probes      [probeCount]int
	Outcomes    map[string]int // jobs by final status
	Records     uint64
	Trace       string // hex SHA-256 of every step
	Violation   *Violation
}

// Summary is the one line `tether sim` prints for a run.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d steps=%d vtime=%s records=%d faults[", r.Config.Seed, r.Steps, r.VirtualTime.Round(time.Millisecond), r.Records)
	for i, n := range r.Faults {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", Fault(i), n)
	}
	b.WriteString("] jobs[")
	for i, k := range slices.Sorted(maps.Keys(r.Outcomes)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, r.Outcomes[k])
	}
	b.WriteString("] probes[")
	for i, n := range r.Probes {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", Probe(i), n)
	}
	fmt.Fprintf(&b, "] trace=%s", r.Trace)
	return b.String()
}

// Phases of a run.
type phase int

const (
	phaseSetup phase = iota
	phaseSafety
	phaseLiveness
)

// LivenessBound is how much virtual time the liveness phase has to bring every job to a
// terminal state once the faults stop: the longest backoff chain plus lease expiries, with room.
const LivenessBound = 3 * time.Hour

// Sim is one run's world: one goroutine, a virtual clock, seeded random streams and a queue of
// timed items; the server's actors run between items, in an order the scheduler stream picks.
type Sim struct {
	cfg   Config
	off   [faultClasses]bool
	rates [faultClasses]float64

	workload, network, sched, serverRand *rand.Rand
	// renewals draws the workers' early token renewals, apart from the workload, so that the
	// rest of a run's workload does not change with them.
	renewals *rand.Rand
	// resends draws the jitter of the workers' resent results (policy.Backoff), apart from the
	// workload too.
	resends   *rand.Rand
	faultRand [faultClasses]*rand.Rand

	start       time.Time
	now         time.Time     // true time; only moves forward
	clockOffset time.Duration // the server's clock is now + clockOffset
	clockJumps  int
	agenda      cells.Agenda // what is due when: deliveries, timers, commits, faults
	steps       int
	phase       phase
	healedAt    time.Time // when the liveness phase began

	trace hash.Hash
	tail  []string

	srv    *server
	oracle *oracle
	// replicated runs the server's log on the simulated stream (stream.go), as processes of
	// nodes that an election picks (election.go); else on Pebble, one server on one disk.
	replicated bool
	nats       *natsModel
	nodes      []*node
	epochs     int
	// received holds the leases whose assignment reached their worker.
	received map[string]bool
	clients  []*client
	workers  []*worker
	// partitioned holds the parties cut off from the server, until when.
	partitioned map[string]time.Time
	// tokens counts the worker tokens the server has made, for their unique names.
	tokens int

	// What the stall and unacknowledged invariants judge by (stall.go): the heartbeats the
	// server processes took, by lease they named; when each process first took one of each
	// worker; the leases that ran out; the leases each process found as it started; the server
	// clock's offset after each jump; and the process whose decisions the oracle folds now (-1:
	// unknown).
	beats     map[string][]beat
	heard     map[heardKey]time.Time
	ranOut    map[string]ranOut
	inherited map[string]int
	offsets   []time.Duration
	deciding  int

	// retention is the server's policy for finished jobs; retentionRand draws the clients'
	// result TTLs, deletes and purges, apart from the rest of the workload.
	retention     projections.Retention
	retentionRand *rand.Rand
	// queueRand draws the clients' queue pauses and resumes; flowRand their flows.
	queueRand *rand.Rand
	flowRand  *rand.Rand
	// keyRand draws the jobs' concurrency keys and the clients' key limits.
	keyRand *rand.Rand
	// rateRand draws the tenants' rate limits and the jobs that name them.
	rateRand *rand.Rand

	result    Result
	violation *Violation
}

// stream returns a random stream derived from the seed and a name, independent of the others.
func stream(seed uint64, name string) *rand.Rand {
	h := sha256.Sum256([]byte(name))
	var k uint64
	for _, b := range h[:8] {
		k = k<<8 | uint64(b)
	}
	return rand.New(rand.NewPCG(seed, k))
}

func newSim(cfg Config) *Sim {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &Sim{
		cfg: cfg, start: start, now: start, trace: sha256.New(), partitioned: map[string]time.Time{}, received: map[string]bool{},
		beats: map[string][]beat{}, heard: map[heardKey]time.Time{}, ranOut: map[string]ranOut{}, inherited: map[string]int{}, offsets: []time.Duration{0}, deciding: -1,
		workload: stream(cfg.Seed, "workload"), network: stream(cfg.Seed, "network"),
		sched: stream(cfg.Seed, "sched"), serverRand: stream(cfg.Seed, "server"), renewals: stream(cfg.Seed, "renewals"),
		resends: stream(cfg.Seed, "resends"),
	}
	for _, f := range cfg.Off {
		s.off[f] = true
	}
	// Swarm testing: each seed draws which classes strike and how often, every class from its
	// own stream, so that turning one off changes nothing in the others.
	for f := range faultClasses {
		r := stream(cfg.Seed, "fault/"+Fault(f).String())
		s.faultRand[f] = r
		if r.IntN(4) == 0 {
			continue // this seed leaves the class out
		}
		s.rates[f] = r.Float64()
	}
	// Short enough that jobs expire within a run: every kind of expiry happens under faults.
	r := stream(cfg.Seed, "retention")
	s.retentionRand = r
	s.queueRand = stream(cfg.Seed, "queues")
	s.flowRand = stream(cfg.Seed, "flows")
	s.keyRand = stream(cfg.Seed, "keys")
	s.rateRand = stream(cfg.Seed, "rates")
	s.retention = projections.Retention{
		Done: time.Duration(10+r.IntN(110)) * time.Second, Dead: time.Duration(20+r.IntN(280)) * time.Second, MaxDead: 1 + r.IntN(4),
	}
	s.result.Config = cfg
	s.oracle = newOracle(s)
	s.replicated = stream(cfg.Seed, "backend").IntN(2) == 0
	return s
}

// newEpoch names a new incarnation of a server process: what belongs to another is dead.
func (s *Sim) newEpoch() int {
	s.epochs++
	return s.epochs
}

// procs are the server processes that run now: the leader, and any that led before and have
// not yet noticed they do not.
func (s *Sim) procs() []*server {
	if !s.replicated {
		return []*server{s.srv}
	}
	var out []*server
	for _, nd := range s.nodes {
		if p := nd.proc; p != nil && p.up {
			out = append(out, p)
		}
	}
	return out
}

// at schedules fn at true time t.
func (s *Sim) at(t time.Time, label string, fn func()) *cells.Item {
	if t.Before(s.now) {
		t = s.now
	}
	return s.agenda.At(t, label, fn)
}

func (s *Sim) after(d time.Duration, label string, fn func()) *cells.Item {
	return s.at(s.now.Add(d), label, fn)
}

// serverNow is the server's clock: true time moved by the clock jumps.
func (s *Sim) serverNow() time.Time { return s.now.Add(s.clockOffset) }

// strikes reports whether a fault of class f strikes now, with chance scale times the seed's
// rate for the class. It draws from the class's stream whether or not the class is on.
func (s *Sim) strikes(f Fault, scale float64) bool {
	hit := s.faultRand[f].Float64() < s.rates[f]*scale
	if !hit || s.off[f] || s.phase != phaseSafety {
		return false
	}
	s.result.Faults[f]++
	return true
}

// faultFree reports whether no fault has struck so far in the run.
func (s *Sim) faultFree() bool {
	for _, n := range s.result.Faults {
		if n > 0 {
			return false
		}
	}
	return true
}

// probe counts a rare path.
func (s *Sim) probe(p Probe) { s.result.Probes[p]++ }

// record adds a line to the trace hash and the tail kept for a violation's report.
func (s *Sim) record(line string) {
	fmt.Fprintf(s.trace, "%d %s\n", s.now.Sub(s.start), line)
	if len(s.tail) == tailLen {
		copy(s.tail, s.tail[1:])
		s.tail = s.tail[:tailLen-1]
	}
	s.tail = append(s.tail, fmt.Sprintf("step %d t=%s %s", s.steps, s.now.Sub(s.start), line))
	if s.cfg.Trace != nil {
		fmt.Fprintln(s.cfg.Trace, s.tail[len(s.tail)-1])
	}
}

const tailLen = 25

// fail records the first violation; the run stops at the end of the step.
func (s *Sim) fail(invariant, format string, args ...any) {
	if s.violation != nil {
		return
	}
	s.violation = &Violation{Invariant: invariant, Step: s.steps, Detail: fmt.Sprintf(format, args...), Tail: slices.Clone(s.tail)}
}

// step runs one step: a message in an actor's mailbox, or the next item. Between items that
// fall at the same instant and the actors' work, the scheduler stream picks.
func (s *Sim) step() bool {
	var runnable []*server
	for _, p := range s.procs() {
		if p.runnableCount() > 0 && !p.frozen {
			runnable = append(runnable, p)
		}
	}
	next, pending := s.agenda.Next()
	due := pending && !next.At.After(s.now)
	switch {
	case len(runnable) > 0 && (!due || s.sched.IntN(3) != 0):
		p := runnable[0]
		if len(runnable) > 1 {
			p = runnable[s.sched.IntN(len(runnable))]
		}
		p.runOne()
	case pending:
		s.agenda.Take()
		s.now = next.At
		s.record(next.Label)
		next.Run()
	default:
		return false
	}
	s.steps++
	if s.nats != nil {
		s.checkReadyAlone()
	}
	return s.violation == nil
}

// Run runs one seed to its end: setup, the safety phase of cfg.Steps steps with faults, then
// heal and liveness, checking the invariants all along. It never returns an error for a broken
// invariant; that is Result.Violation.
func Run(cfg Config) (res *Result, err error) {
	s := newSim(cfg)
	defer s.close()
	if err := s.setup(); err != nil {
		return nil, err
	}
	for s.steps < cfg.Steps && s.step() {
	}
	if s.violation == nil {
		s.heal()
		deadline := s.now.Add(LivenessBound)
		for s.violation == nil && !s.settled() && s.now.Before(deadline) && s.step() {
		}
		if s.violation == nil {
			s.final()
		}
	}
	s.result.Steps = s.steps
	s.result.VirtualTime = s.now.Sub(s.start)
	s.result.Outcomes = s.oracle.outcomes()
	s.result.Records = s.srv.synced.Seq
	s.result.Trace = hex.EncodeToString(s.trace.Sum(nil))
	s.result.Violation = s.violation
	// A copy: a pointer into s would keep the whole run (its in-memory disks, its views, its
	// oracle) alive for as long as the caller keeps the result, and tether sim keeps every seed's.
	r := s.result
	return &r, nil
}

func (s *Sim) close() {
	for _, nd := range s.nodes {
		if p := nd.proc; p != nil && p.up {
			p.link.kill()
			p.shutdown()
		}
	}
	if s.srv != nil && s.srv.node == nil {
		s.srv.shutdown()
	}
}
