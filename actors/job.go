package actors

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/tetherhq/tether/actors/signing"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Job is the behaviour of one in-flight job: from the lease the dispatcher starts until the
// lease ends (completed, failed, expired, released or cancelled). Its state is the job's
// snapshot as the projections hold it, with the events it decided folded in at once.
//
// While no lease is held, the job belongs to the dispatcher, and the actor forwards every
// command there; commands that arrive while the end of a lease is not durable yet wait, then
// follow the lease-ended notice, so the dispatcher sees them in that order.
type Job struct {
	id  string
	job *projections.Job // own, or nil before Recover finds the job
	// own is the memory of job, the actor's copy of the projections' (ReadProjections).
	own       projections.Job
	publicKey string
	timer     TimerID
	ending    bool // a decision ended the lease; the events are not durable yet
	// inherited is the lease Recover found, until a heartbeat names it: one made before a
	// restart, which the worker may never have got (disowned).
	inherited string
	stash     []stashed
	pipe      pipeline
	// keyOf is the worker whose key a lease's start reads (ReadProjections).
	keyOf string
	// leased is room for the event of a lease's start. A job starts a lease only once the last
	// one's end is durable, and so its start too, which the runtime applied before it told of
	// the end: no append still reads the room when it is written again.
	leased [1]eventlog.Payload
	// timerMsg is the lease timer's message, sent as a pointer into the Job so that it is not
	// boxed apart. A message is not written once sent: every timer of one lease says the same,
	// and another lease's (after a Recover) gets one of its own.
	timerMsg leaseTimer
	// endRoom is room for the end of its lease (end): a job's actor ends one lease, then stops
	// once the end is durable. A second end in it gets room of its own: the first's notices
	// are not written once sent.
	endRoom leaseEnd
}

type stashed struct {
	msg    any
	sender Ref
}

// Lease timing and retry backoff.
const (
	BackoffBase = 10 * time.Second
	BackoffMax  = 300 * time.Second
	// BackoffJitterFraction bounds the jitter added to a backoff: up to a tenth of it.
	BackoffJitterFraction = 10
	// LeaseReleasesMax is how many leases of a job may be released in a row without spending
	// an attempt; the next release spends one.
	LeaseReleasesMax = 10
)

// Backoff is the wait before a retry after the n-th failed attempt (n from 1):
// min(300 s, 10 s·2^(n-1)).
func Backoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	if n > 6 { // 10 s·2^5 = 320 s is already past the cap
		return BackoffMax
	}
	return min(BackoffMax, BackoffBase<<(n-1))
}

// NewJob returns the behaviour of the actor of job id.
func NewJob(id string) *Job {
	return &Job{id: id}
}

// ReadProjections implements Reader (Env.ReadBy, which reads with the Job itself: a func made
// for Env.Read would be an allocation). It reads what the job needs of the projections: while
// it has no snapshot (Recover), the snapshot and the key of the worker holding its lease, if
// one does; else the key of the worker keyOf (a lease's start).
func (a *Job) ReadProjections(s *projections.Set) {
	worker := a.keyOf
	if a.job == nil {
		j := s.JobRef(a.id)
		if j == nil {
			return
		}
		j.CloneInto(&a.own)
		if a.job = &a.own; a.job.Lease == nil {
			return
		}
		worker = a.job.Lease.WorkerID
	}
	a.publicKey = s.PublicKey(worker)
}

// leaseTimer is sent as a pointer (armTimer).
type leaseTimer struct{ leaseID string }

// disowned: a heartbeat of the lease's worker, the first since the lease was inherited
// (Job.inherited), did not name it.
type disowned struct{ WorkerID, LeaseID string }

type (
	leaseGranted struct{}
	graceGranted struct{}
	progressDone struct {
		reply  Ref
		number int
	}
	cancelRequestDone struct {
		reply     Ref
		sessionID string
		leaseID   string
	}
)

// leaseEnd is the end of a lease, in memory the job's actor has (Job.endRoom): the log's
// then-value (the leaseEnd itself, a pointer, so it is not boxed apart), room for its events
// (the end, and a retry, cancel or dead letter after it), and the two notices the dispatcher
// gets of it, sent as pointers into it for the same reason. Nothing writes a notice once it is
// sent.
type leaseEnd struct {
	reply   Ref // zero for expiries and releases
	leaseID string
	requeue *Waiting
	events  [2]eventlog.Payload
	ending  leaseEnding
	ended   leaseEnded
}

// Recover implements Behaviour. A job found leased (after a restart of the server or of this
// actor) gets a fresh lease_ttl of grace, logged, because heartbeat extensions live only in
// memory.
func (a *Job) Recover(env Env) {
	a.job, a.publicKey, a.ending, a.stash, a.pipe, a.inherited = nil, "", false, nil, pipeline{}, ""
	env.ReadBy(a)
	if a.job == nil {
		return
	}
	if a.job.Lease == nil {
		// A restart may have lost the notice that the last lease ended; the dispatcher ignores
		// it unless it still tracks that very lease.
		if j := a.job; j.LastLeaseID != "" {
			var requeue *Waiting
			if j.Waiting() {
				w := waitingOf(j, j.RunAt)
				requeue = &w
			}
			env.Send(DispatcherRef(), &leaseEnded{JobID: j.ID, LeaseID: j.LastLeaseID, Requeue: requeue, Seq: j.LastSeq, FlowID: j.FlowID, Tenant: j.Tenant})
		}
		return
	}
	l := a.job.Lease
	a.inherited = l.LeaseID
	ev := eventlog.JobLeaseExtended{JobID: a.id, LeaseID: l.LeaseID, ExpiresAt: env.Now().Add(a.job.LeaseTTL).UTC(), Reason: eventlog.ExtendedRestartGrace}
	a.decide(env, []eventlog.Payload{ev}, graceGranted{})
	a.armTimer(env)
}

// Receive implements Behaviour. A command on the lease is decided here only while the job holds
// one whose end is not on its way to the log (onLease).
func (a *Job) Receive(env Env, msg any) {
	switch m := msg.(type) {
	case *Persisted:
		a.persisted(env, *m)
	case *startLease:
		a.start(env, m)
	case Progress:
		if a.onLease(env, msg) {
			a.progress(env, m)
		}
	case Complete:
		if a.onLease(env, msg) {
			a.complete(env, m)
		}
	case Fail:
		if a.onLease(env, msg) {
			a.fail(env, m)
		}
	case Cancel:
		if a.onLease(env, msg) {
			a.cancel(env, m)
		}
	case extend:
		if a.onLease(env, msg) {
			a.extend(env, m)
		}
	case ReleaseLease:
		if a.onLease(env, msg) {
			a.releaseByWorker(env, m)
		}
	case Undelivered:
		if a.onLease(env, msg) {
			a.undelivered(env, m)
		}
	case disowned:
		if a.onLease(env, msg) {
			a.disowned(env, m)
		}
	case *leaseTimer:
		if a.onLease(env, msg) {
			a.expire(env, m)
		}
	case revokeLease:
		if a.onLease(env, msg) {
			a.revoke(env, m)
		}
	}
}

// onLease reports whether a command on the lease is the job's to decide now. While a lease's
// end is on its way to the log, a command waits (stash), and goes to the dispatcher once the
// end is durable; the lease's timer and a disowning are dropped. While the job holds no lease,
// the dispatcher answers a command; a timer, a revocation or a disowning has nothing left to
// end.
func (a *Job) onLease(env Env, msg any) bool {
	_, timer := msg.(*leaseTimer)
	_, revoke := msg.(revokeLease)
	_, disown := msg.(disowned)
	switch {
	case a.ending:
		if !timer && !disown {
			a.stash = append(a.stash, stashed{msg, env.Sender()})
		}
		return false
	case a.job == nil || a.job.Lease == nil:
		if !timer && !revoke && !disown {
			env.Forward(DispatcherRef(), msg, env.Sender())
		}
		return false
	}
	return true
}

func (a *Job) extend(env Env, m extend) {
	if a.holds(m.WorkerID, m.LeaseID) {
		a.job.Lease.ExpiresAt = env.Now().Add(a.job.LeaseTTL)
		a.inherited = ""
	}
}

func (a *Job) undelivered(env Env, m Undelivered) {
	if a.job.Lease.LeaseID == m.LeaseID {
		a.release(env, Ref{}, eventlog.LeaseUndelivered, "")
	}
}

// disowned releases a lease made before a restart, at once and unspent, when its worker says
// it does not hold it and nothing says it ever did: no worker acknowledged the assignment,
// which never reached it. One the worker wrote under got to it, and runs out as any other.
func (a *Job) disowned(env Env, m disowned) {
	if a.holds(m.WorkerID, m.LeaseID) && a.inherited == m.LeaseID && !a.job.LeaseWrittenUnder() && !mutantKeepUnacknowledged {
		a.release(env, Ref{}, eventlog.LeaseUnacknowledged, "")
	}
}

func (a *Job) revoke(env Env, m revokeLease) {
	if a.job.Lease.WorkerID == m.WorkerID {
		a.end(env, Ref{}, eventlog.JobLeaseExpired{JobID: a.id, LeaseID: a.job.Lease.LeaseID, WorkerID: m.WorkerID, Attempt: a.job.Attempt, Reason: eventlog.LeaseExpiredWorkerRevoked})
	}
}

func (a *Job) holds(workerID, leaseID string) bool {
	l := a.job.Lease
	return l != nil && sameLease(leaseID, l.LeaseID) && l.WorkerID == workerID
}

// decide folds events into the actor's state at once and persists them.
func (a *Job) decide(env Env, events []eventlog.Payload, then any) {
	now := env.Now()
	for _, e := range events {
		a.job.Fold(0, now, e)
	}
	a.pipe.persist(env, events, then)
}

func (a *Job) start(env Env, m *startLease) {
	if a.ending { // the dispatcher learns that the last lease ended before it leases the job again
		env.Send(DispatcherRef(), leaseRefused{JobID: m.JobID, LeaseID: m.LeaseID})
		return
	}
	if a.job == nil || !a.job.Waiting() || a.job.Lease != nil {
		env.Send(DispatcherRef(), leaseRefused{JobID: m.JobID, LeaseID: m.LeaseID, Idle: a.job == nil || a.job.Lease == nil})
		return
	}
	a.keyOf = m.WorkerID
	env.ReadBy(a)
	var nonce [16]byte
	r := env.Rand()
	for i := range nonce {
		nonce[i] = byte(r.Uint32())
	}
	ev := eventlog.JobLeased{
		JobID: a.id, LeaseID: m.LeaseID, WorkerID: m.WorkerID, SessionID: m.SessionID,
		Nonce: hex.EncodeToString(nonce[:]), Attempt: a.job.Attempt + 1,
		ExpiresAt: env.Now().Add(a.job.LeaseTTL).UTC(), RateGrants: m.RateGrants,
	}
	a.job.Fold(0, env.Now(), ev)
	// Lease and assignment in one step: the runtime sends the assignment to the worker's session
	// once job.leased is durable, with no Persisted back here first. The relay is not the
	// pipeline's to count: nothing the job answers waits for it (a worker's command on the lease
	// comes only after the assignment), and a later persist completes after it anyway.
	if mutantLeaseBeforeFsync {
		a.pipe.persist(env, []eventlog.Payload{ev}, leaseGranted{})
		env.Send(SessionRef(ev.SessionID), a.assignment())
	} else {
		a.leased[0] = ev
		env.Relay(a.leased[:], SessionRef(ev.SessionID), a.assignment())
	}
	a.armTimer(env)
}

// assignment is the current lease as the worker's session gets it.
func (a *Job) assignment() Assignment {
	l := a.job.Lease
	return Assignment{
		JobID: a.id, LeaseID: l.LeaseID, Nonce: l.Nonce, Queue: a.job.Queue, JobType: a.job.Type,
		Payload: a.job.Payload, Attempt: l.Attempt, LeaseExpiresAt: l.ExpiresAt,
		HeartbeatInterval: HeartbeatIntervalFor(a.job.LeaseTTL), Traceparent: a.job.Traceparent,
	}
}

func (a *Job) armTimer(env Env) {
	env.Cancel(a.timer)
	msg := &a.timerMsg
	switch id := a.job.Lease.LeaseID; msg.leaseID {
	case "":
		msg.leaseID = id
	case id:
	default:
		msg = &leaseTimer{id}
	}
	a.timer = env.After(max(a.job.Lease.ExpiresAt.Sub(env.Now()), 0), msg)
}

func (a *Job) progress(env Env, m Progress) {
	switch {
	case !a.holds(m.WorkerID, m.LeaseID):
		env.Send(env.Sender(), ProgressAck{Err: notCovered(env, m.WorkerID, a.id)})
		return
	case !validName(m.Kind, EventTypeLenMax, true):
		env.Send(env.Sender(), ProgressAck{Err: reject(CodeInvalidArgument, "event_type must be 1..%d of [A-Za-z0-9_.:/-]", EventTypeLenMax)})
		return
	case len(m.Data) > ProgressDataBytesMax:
		env.Send(env.Sender(), ProgressAck{Err: reject(CodePayloadTooLarge, "event data is %d bytes; the limit is %d", len(m.Data), ProgressDataBytesMax)})
		return
	case len(m.Data) > 0 && !json.Valid(m.Data):
		env.Send(env.Sender(), ProgressAck{Err: reject(CodeInvalidArgument, "event data is not valid JSON")})
		return
	case m.Seq < 0 || m.Seq > ProgressSeqMax:
		env.Send(env.Sender(), ProgressAck{Err: reject(CodeInvalidArgument, "seq %d is outside 1..%d (or 0: not numbered)", m.Seq, ProgressSeqMax)})
		return
	case m.Seq > 0 && m.Seq <= a.job.WorkerSeq && !mutantProgressTwice:
		// A repeat: the worker did not hear the first write's answer. It is answered once that
		// write is durable, as the first would have been, and nothing is written.
		reply, number := env.Sender(), a.numberOf(m.Seq)
		a.pipe.whenSettled(func() { env.Send(reply, ProgressAck{Number: number}) })
		return
	}
	a.decide(env, []eventlog.Payload{eventlog.JobProgress{JobID: a.id, LeaseID: m.LeaseID, Kind: m.Kind, Data: m.Data, WorkerSeq: m.Seq}},
		progressDone{reply: env.Sender(), number: a.job.Events + 1})
}

// ProgressSeqMax bounds the worker's numbering of its events within one lease.
const ProgressSeqMax = 1 << 31

// numberOf is the stream number of the current lease's event the worker numbered seq, as far
// as the snapshot remembers it (the last ProgressKept events); 0 if it does not.
func (a *Job) numberOf(seq int) int {
	if seq == a.job.WorkerSeq {
		return a.job.WorkerSeqEvent
	}
	// Newest first: within a lease the numbers written only rise, so one that does not fall
	// going back is an earlier lease's.
	below := a.job.WorkerSeq + 1
	for i := len(a.job.Progress) - 1; i >= 0; i-- {
		p := a.job.Progress[i]
		switch {
		case p.WorkerSeq == 0:
		case p.WorkerSeq >= below:
			return 0
		case p.WorkerSeq == seq:
			return p.Number
		default:
			below = p.WorkerSeq
		}
	}
	return 0
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func (a *Job) complete(env Env, m Complete) {
	reply := func(r *Rejection) { env.Send(env.Sender(), Done{Err: r}) }
	if !a.holds(m.WorkerID, m.LeaseID) {
		reply(notCovered(env, m.WorkerID, a.id))
		return
	}
	if m.Nonce != a.job.Lease.Nonce && !mutantSkipNonceCheck {
		reply(reject(CodeLeaseMismatch, "the nonce is not the one the lease was granted with"))
		return
	}
	output := orNull(m.Output)
	if len(output) > OutputBytesMax {
		reply(reject(CodePayloadTooLarge, "output is %d bytes; the limit is %d", len(output), OutputBytesMax))
		return
	}
	hash, err := signing.OutputHash(output)
	if err != nil {
		reply(reject(CodeInvalidArgument, "output is not valid JSON: %v", err))
		return
	}
	if m.OutputHash != "" && m.OutputHash != hash {
		reply(reject(CodeInvalidArgument, "output_hash %q is not the SHA-256 of the canonical output", clip(m.OutputHash)))
		return
	}
	if a.publicKey != "" && !signing.VerifyCompletion(a.publicKey, m.Signature, a.id, m.LeaseID, m.Nonce, hash) {
		reply(reject(CodeSignatureInvalid, "the signature does not verify with the worker's registered key"))
		return
	}
	if a.job.CancelRequested && !mutantCompleteAfterCancel {
		// A cancel asked for wins over a completion that comes after it (the worker finished
		// before it heard, or its handler returned what it had when told to stop): the
		// completion is the worker's acknowledgement, as a failure would be, and the job ends
		// cancelled. Its output is not kept; the failure names its hash.
		a.end(env, env.Sender(), eventlog.JobFailed{JobID: a.id, LeaseID: m.LeaseID, Attempt: a.job.Attempt, ErrorCode: cancelledCode,
			Message: "completed after its cancel was asked for; the output (sha256 " + hash + ") is not kept"})
		return
	}
	a.end(env, env.Sender(), eventlog.JobSucceeded{JobID: a.id, LeaseID: m.LeaseID, Attempt: a.job.Attempt, Output: output, OutputHash: hash, Signature: m.Signature})
}

// Limits on a failure report.
const errorCodeLenMax = 64

// cancelledCode is the error code of an attempt ended by a cancel: the one a worker fails a
// cancelled job with, and the one the server gives a completion that came after the cancel.
const cancelledCode = "cancelled"

func (a *Job) fail(env Env, m Fail) {
	if !a.holds(m.WorkerID, m.LeaseID) {
		env.Send(env.Sender(), Done{Err: notCovered(env, m.WorkerID, a.id)})
		return
	}
	code := m.Code
	if code == "" {
		code = "error"
	}
	if !validName(code, errorCodeLenMax, true) {
		env.Send(env.Sender(), Done{Err: reject(CodeInvalidArgument, "error_code must be 1..%d of [A-Za-z0-9_.:/-]", errorCodeLenMax)})
		return
	}
	msg := m.Message
	if len(msg) > ErrorMessageLenMax {
		msg = msg[:ErrorMessageLenMax]
	}
	a.end(env, env.Sender(), eventlog.JobFailed{JobID: a.id, LeaseID: m.LeaseID, Attempt: a.job.Attempt, ErrorCode: code, Message: msg, Retryable: m.Retryable})
}

func (a *Job) releaseByWorker(env Env, m ReleaseLease) {
	if !a.holds(m.WorkerID, m.LeaseID) {
		env.Send(env.Sender(), Done{Err: notCovered(env, m.WorkerID, a.id)})
		return
	}
	reason := cmp.Or(m.Reason, "released")
	if own := eventlog.ServerReleaseReasons(); !validName(reason, errorCodeLenMax, true) || slices.Contains(own, reason) {
		env.Send(env.Sender(), Done{Err: reject(CodeInvalidArgument, "reason must be 1..%d of [A-Za-z0-9_.:/-], and not the server's own (%s)",
			errorCodeLenMax, strings.Join(own, ", "))})
		return
	}
	msg := m.Message
	if len(msg) > ErrorMessageLenMax {
		msg = msg[:ErrorMessageLenMax]
	}
	a.release(env, env.Sender(), reason, msg)
}

// release ends the lease with the job not attempted: no attempt is spent and the job is queued
// again at once. A job released LeaseReleasesMax times in a row spends the attempt instead, so
// a worker that keeps giving a job back cannot keep it from running, or from failing, forever.
func (a *Job) release(env Env, reply Ref, reason, message string) {
	l := a.job.Lease
	a.end(env, reply, eventlog.JobLeaseReleased{JobID: a.id, LeaseID: l.LeaseID, WorkerID: l.WorkerID, Attempt: a.job.Attempt,
		Reason: reason, Message: message, AttemptSpent: a.job.Releases >= LeaseReleasesMax})
}

func (a *Job) cancel(env Env, m Cancel) {
	if m.Tenant != a.job.Tenant {
		env.Send(env.Sender(), Done{Err: reject(CodeJobNotFound, "no job %q", clip(m.JobID))})
		return
	}
	if a.job.CancelRequested {
		reply := env.Sender()
		a.pipe.whenSettled(func() { env.Send(reply, Done{}) })
		return
	}
	a.decide(env, []eventlog.Payload{eventlog.JobCancelRequested{JobID: a.id, APIKeyID: m.APIKeyID}},
		cancelRequestDone{reply: env.Sender(), sessionID: a.job.Lease.SessionID, leaseID: a.job.Lease.LeaseID})
}

func (a *Job) expire(env Env, m *leaseTimer) {
	l := a.job.Lease
	if l.LeaseID != m.leaseID {
		return // a timer of an earlier lease
	}
	now := env.Now()
	if now.Before(l.ExpiresAt) { // extended by heartbeats, or the clock went back
		a.armTimer(env)
		return
	}
	// A server that stalled read nothing its workers sent meanwhile: their heartbeats may wait
	// in its sockets still, and this timer may have fired before they are read. Every lease
	// runs lease_ttl from the end of the stall, as after a restart.
	if grace := env.Resumed().Add(a.job.LeaseTTL); now.Before(grace) && !mutantIgnoreStall {
		a.decide(env, []eventlog.Payload{eventlog.JobLeaseExtended{JobID: a.id, LeaseID: l.LeaseID, ExpiresAt: grace.UTC(), Reason: eventlog.ExtendedStallGrace}},
			graceGranted{})
		a.armTimer(env)
		return
	}
	a.end(env, Ref{}, eventlog.JobLeaseExpired{JobID: a.id, LeaseID: l.LeaseID, WorkerID: l.WorkerID, Attempt: a.job.Attempt, Reason: eventlog.LeaseExpiredRanOut})
}

// end ends the lease with the given event and what must follow it in the same append: for a
// success nothing; for a release that spends no attempt a cancel (if one was asked for) or
// the queue at once; for a failure, expiry, revocation or a release that spends the attempt a
// cancel (if one was asked for), a retry with backoff, or the dead-letter queue.
func (a *Job) end(env Env, reply Ref, ev eventlog.Payload) {
	j, l := a.job, a.job.Lease
	end := &a.endRoom
	if end.leaseID != "" {
		end = new(leaseEnd)
	}
	events := append(end.events[:0], ev)
	var requeue *Waiting
	release, released := ev.(eventlog.JobLeaseReleased)
	switch _, succeeded := ev.(eventlog.JobSucceeded); {
	case released && j.CancelRequested:
		events = append(events, eventlog.JobCancelled{JobID: a.id, Reason: eventlog.CancelledLeaseReleased})
	case released && !release.AttemptSpent:
		w := waitingOf(j, time.Time{})
		requeue = &w
	case !succeeded:
		retryable, revoked, expired := true, false, false
		switch e := ev.(type) {
		case eventlog.JobFailed:
			retryable = e.Retryable
		case eventlog.JobLeaseExpired:
			revoked, expired = e.Reason == eventlog.LeaseExpiredWorkerRevoked, true
		}
		switch {
		case j.CancelRequested:
			reason := eventlog.CancelledWorkerAcknowledged
			if expired {
				reason = eventlog.CancelledLeaseExpired
			}
			events = append(events, eventlog.JobCancelled{JobID: a.id, Reason: reason})
		case retryable && j.Attempt < j.MaxAttempts:
			var backoff time.Duration
			if !revoked {
				backoff = Backoff(j.Attempt - j.AttemptBase)
				backoff += time.Duration(env.Rand().Int64N(int64(backoff)/BackoffJitterFraction + 1))
			}
			runAt := env.Now().Add(backoff).UTC()
			events = append(events, eventlog.JobRetryScheduled{JobID: a.id, Attempt: j.Attempt, BackoffMillis: backoff.Milliseconds(), RunAt: runAt})
			w := waitingOf(j, runAt)
			requeue = &w
		default:
			reason := eventlog.DeadMaxAttempts
			switch {
			case expired:
				reason = eventlog.DeadLeaseExpired
			case !retryable:
				reason = eventlog.DeadNonRetryable
			}
			events = append(events, eventlog.JobDeadLettered{JobID: a.id, Reason: reason, Attempt: j.Attempt})
		}
	}
	env.Cancel(a.timer)
	env.DropRelays() // a lease that ends before it is durable is never assigned
	a.ending = true
	end.reply, end.leaseID, end.requeue = reply, l.LeaseID, requeue
	a.decide(env, events, end)
	// Sent after the events went to the log, so whatever the dispatcher leases next is appended
	// after them (see leaseEnding).
	end.ending = leaseEnding{JobID: a.id, LeaseID: l.LeaseID}
	env.Send(DispatcherRef(), &end.ending)
}

func (a *Job) persisted(env Env, m Persisted) {
	defer a.pipe.settled()
	err := unavailable(m.Err)
	switch t := m.Then.(type) {
	case leaseGranted: // mutant_lease_before_fsync's: the assignment left already
	case progressDone:
		env.Send(t.reply, ProgressAck{Number: t.number, Receipt: receiptOf(m.Receipt), Err: err})
	case cancelRequestDone:
		if err == nil {
			env.Send(SessionRef(t.sessionID), CancelNotice{JobID: a.id, LeaseID: t.leaseID})
		}
		env.Send(t.reply, Done{Receipt: receiptOf(m.Receipt), Err: err})
	case *leaseEnd:
		if err != nil {
			if !t.reply.IsZero() {
				env.Send(t.reply, Done{Err: err})
			}
			return
		}
		a.ending = false
		// The lease is over: the cell stops itself, with no stop delivery, before the
		// dispatcher hears of it, whose Stop then finds nothing bound; a next lease makes a
		// new cell, which recovers from the projections that hold this end.
		env.Stop(JobRef(a.id))
		t.ended = leaseEnded{JobID: a.id, LeaseID: t.leaseID, Requeue: t.requeue, Seq: m.Receipt.Last, FlowID: a.job.FlowID, Tenant: a.job.Tenant}
		env.Send(DispatcherRef(), &t.ended)
		if !t.reply.IsZero() {
			env.Send(t.reply, Done{Receipt: receiptOf(m.Receipt)})
		}
		for _, s := range a.stash {
			env.Forward(DispatcherRef(), s.msg, s.sender)
		}
		a.stash = nil
	}
}
