package transport

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/tracing"
	"github.com/tetherhq/tether/transport/wire"
)

// noLabels is the labels of every job resource without any: an empty object on the wire, where
// encoding/json writes null for a nil map. Nothing writes into a resource's labels (they are the
// projection's own map when the job has any).
var noLabels = map[string]string{}

// jobResource renders a job snapshot as the job resource, as it stands at now.
func jobResource(j *projections.Job, now time.Time) wire.Job {
	out := wire.Job{
		ID: j.ID, Tenant: j.Tenant, Queue: j.Queue, Type: j.Type, Payload: j.Payload, Priority: j.Priority,
		Labels: j.Labels, Status: string(j.StatusAt(now)), Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		CancelRequested: j.CancelRequested, Output: j.Output, OutputHash: j.OutputHash, DeadReason: j.DeadReason,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, EventsTruncated: j.EventsTruncated,
		FlowID: j.FlowID, FlowStep: j.FlowStep, ScheduleID: j.ScheduleID, ConcurrencyKey: j.ConcurrencyKey,
		RateLimits: wireRateLimits(j.RateLimits),
	}
	if out.Labels == nil {
		out.Labels = noLabels
	}
	if !j.RunAt.IsZero() {
		at := j.RunAt
		out.RunAt = &at
	}
	if j.Lease != nil {
		out.Lease = &wire.Lease{LeaseID: j.Lease.LeaseID, WorkerID: j.Lease.WorkerID, ExpiresAt: j.Lease.ExpiresAt}
	}
	if j.Error != nil {
		out.Error = &wire.JobError{Code: j.Error.Code, Message: j.Error.Message}
	}
	if !j.StartedAt.IsZero() {
		started, worker := j.StartedAt, j.WorkerID // copies: j may be the live projection's
		out.StartedAt, out.WorkerID = &started, &worker
	}
	if !j.FinishedAt.IsZero() {
		finished := j.FinishedAt
		out.FinishedAt = &finished
	}
	return out
}

// specOf turns a submit body into a job spec; header is the Idempotency-Key header, if any.
func specOf(req wire.SubmitRequest, header string) (actors.JobSpec, error) {
	delay, err := secondsField("delay_seconds", req.DelaySeconds, 0, actors.DelayMax)
	if err != nil {
		return actors.JobSpec{}, err
	}
	leaseTTL, err := secondsField("lease_ttl_seconds", req.LeaseTTLSeconds, actors.LeaseTTLMin, actors.LeaseTTLMax)
	if err != nil {
		return actors.JobSpec{}, err
	}
	resultTTL, err := secondsField("result_ttl_seconds", req.ResultTTLSeconds, actors.ResultTTLMin, actors.ResultTTLMax)
	if err != nil {
		return actors.JobSpec{}, err
	}
	key := req.IdempotencyKey
	if header != "" {
		if key != "" && key != header {
			return actors.JobSpec{}, errorf(actors.CodeInvalidArgument, "the Idempotency-Key header and the idempotency_key field differ")
		}
		key = header
	}
	spec := actors.JobSpec{
		Queue: req.Queue, Type: req.Type, Payload: req.Payload, Priority: req.Priority, Delay: delay,
		MaxAttempts: req.MaxAttempts, LeaseTTL: leaseTTL, Labels: req.Labels,
		IdempotencyKey: key, ReservationID: req.ReservationID, ResultTTL: resultTTL, ConcurrencyKey: req.ConcurrencyKey,
		RateLimits: rateLimitUses(req.RateLimits),
	}
	if req.RunAt != nil {
		spec.RunAt = *req.RunAt
	}
	return spec, nil
}

// submitted holds the spec a submit hands the broker (a variadic argument through the Core
// interface escapes) and what its answer points at besides the job: one allocation for all.
type submitted struct {
	spec    [1]actors.JobSpec
	receipt wire.Receipt
	hit     bool
}

func (s *Server) submit(r *request) error {
	var req wire.SubmitRequest
	if err := r.decodeSubmit(int64(actors.DefaultPayloadBytesMax+envelopeBytes), &req); err != nil {
		return err
	}
	x := new(submitted)
	var err error
	if x.spec[0], err = specOf(req, r.Header.Get(IdempotencyKeyHeader)); err != nil {
		return err
	}
	tp, span := s.startSubmit(r, "tether.submit")
	res, rc, err := r.b.Submit(withTraceparent(r.Context(), tp), r.by.tenant, r.by.apiKeyID, x.spec[:]...)
	if err != nil {
		span.End(err)
		return err
	}
	span.SetString(tracing.AttrJobID, res[0].Job.ID)
	span.SetString(tracing.AttrQueue, res[0].Job.Queue)
	span.SetInt(tracing.AttrSeq, int64(rc.Seq))
	span.End(nil)
	job := jobResource(res[0].Job, s.clock())
	x.receipt, x.hit = receipt(rc), res[0].IdempotentHit
	job.Receipt, job.IdempotentHit = &x.receipt, &x.hit
	status := http.StatusCreated
	if x.hit {
		status = http.StatusOK
	}
	writeJob(r.w, status, &job)
	return nil
}

func (s *Server) submitBatch(r *request) error {
	var req wire.BatchRequest
	if err := r.decode(BatchBodyBytesMax, &req); err != nil {
		return err
	}
	if len(req.Jobs) == 0 || len(req.Jobs) > actors.BatchJobsMax {
		return errorf(actors.CodeInvalidArgument, "a batch holds 1..%d jobs, not %d", actors.BatchJobsMax, len(req.Jobs))
	}
	specs := make([]actors.JobSpec, len(req.Jobs))
	for i, j := range req.Jobs {
		spec, err := specOf(j, "")
		if err != nil {
			e := toAPIError(err)
			e.details = map[string]any{"index": i}
			return e
		}
		specs[i] = spec
	}
	tp, span := s.startSubmit(r, "tether.submit_batch")
	res, rc, err := r.b.Submit(withTraceparent(r.Context(), tp), r.by.tenant, r.by.apiKeyID, specs...)
	if err != nil {
		span.End(err)
		return err
	}
	span.SetInt(tracing.AttrJobs, int64(len(res)))
	span.SetInt(tracing.AttrSeq, int64(rc.Seq))
	span.End(nil)
	now := s.clock()
	out := wire.BatchResponse{Jobs: make([]wire.Job, len(res)), Receipt: new(receipt(rc))}
	hits := make([]bool, len(res))
	for i, sr := range res {
		out.Jobs[i] = jobResource(sr.Job, now)
		hits[i] = sr.IdempotentHit
		out.Jobs[i].IdempotentHit = &hits[i]
	}
	return r.reply(http.StatusCreated, &out)
}

func (s *Server) getJob(r *request) error {
	j, ok := r.b.Get(r.by.tenant, r.PathValue("id"))
	if !ok {
		return notFound(r.b, r.by.tenant, r.PathValue("id"))
	}
	return r.reply(http.StatusOK, liveJob(r.b, j, s.clock()))
}

// notFound answers for a job that is not in the views: JOB_EXPIRED if it was the tenant's and
// has left them, else JOB_NOT_FOUND.
func notFound(b Core, tenant, id string) error {
	if b.Expired(tenant, id) {
		return errorf(actors.CodeJobExpired, "job %s finished and has left every view (its retention ended, or it was deleted)", clip(id))
	}
	return errorf(actors.CodeJobNotFound, "no job %q", clip(id))
}

// liveJob is jobOf with what the broker knows beyond the log: a lease's expiry as its last
// heartbeat extended it, and when a finished job leaves the views.
func liveJob(b Core, j *projections.Job, now time.Time) wire.Job {
	out := jobResource(j, now)
	if l := out.Lease; l != nil {
		l.ExpiresAt = b.LeaseExpiresAt(l.WorkerID, l.LeaseID, j.LeaseTTL, l.ExpiresAt)
	}
	if until, ok := b.Retention().Until(j); ok {
		out.ExpiresAt = &until
	}
	return out
}

// ListLimitDefault is the page size of GET /v1/jobs and /v1/flows without a limit.
const ListLimitDefault = 100

func (s *Server) listJobs(r *request) error {
	q := r.URL.Query()
	f := projections.JobFilter{Tenant: r.by.tenant, Status: projections.Status(q.Get("status")), Queue: q.Get("queue"), Type: q.Get("type"),
		Label: q.Get("label"), After: q.Get("cursor")}
	if err := checkFilter(f); err != nil {
		return err
	}
	switch q.Get("order") {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		return errorf(actors.CodeInvalidArgument, "order is oldest (the default) or newest")
	}
	limit, err := listLimit(q)
	if err != nil {
		return err
	}
	f.Limit = limit
	jobs, more := r.b.List(f)
	now := s.clock()
	out := wire.JobList{Jobs: make([]wire.Job, len(jobs))}
	for i, j := range jobs {
		out.Jobs[i] = liveJob(r.b, j, now)
	}
	if more && len(jobs) > 0 {
		out.NextCursor = jobs[len(jobs)-1].ID
	}
	return r.reply(http.StatusOK, out)
}

// listLimit is a list's ?limit=, ListLimitDefault if it is not given.
func listLimit(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return ListLimitDefault, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > projections.ListLimitMax {
		return 0, errorf(actors.CodeInvalidArgument, "limit must be 1..%d", projections.ListLimitMax)
	}
	return n, nil
}

// checkFilter refuses a job filter with a label that is not key=value, an unknown status or a
// cursor this API did not give.
func checkFilter(f projections.JobFilter) error {
	if l := f.Label; l != "" {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" || len(k) > actors.LabelKeyLenMax || len(v) > actors.LabelValueLenMax || strings.IndexByte(l, 0) >= 0 {
			return errorf(actors.CodeInvalidArgument, "label %q must be key=value, a key of 1..%d bytes and a value of at most %d", clip(l), actors.LabelKeyLenMax, actors.LabelValueLenMax)
		}
	}
	switch f.Status {
	case "", projections.StatusQueued, projections.StatusScheduled, projections.StatusLeased, projections.StatusSucceeded,
		projections.StatusFailed, projections.StatusCancelled:
	default:
		return errorf(actors.CodeInvalidArgument, "status %q is not one of queued, scheduled, leased, succeeded, failed, cancelled", clip(string(f.Status)))
	}
	return checkCursor(f.After)
}

// checkCursor refuses a list's ?cursor= that is not a next_cursor the API gave (an id).
func checkCursor(c string) error {
	if c == "" {
		return nil
	}
	if _, err := ulid.ParseStrict(c); err != nil {
		return errorf(actors.CodeInvalidArgument, "cursor %q is not a next_cursor this API gave", clip(c))
	}
	return nil
}

// bulkFilter reads the body of a bulk action into a filter of the caller's jobs, and whether
// the body says all: true.
func bulkFilter(r *request) (projections.JobFilter, bool, error) {
	var req wire.BulkRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return projections.JobFilter{}, false, err
	}
	f := projections.JobFilter{Tenant: r.by.tenant, Status: projections.Status(req.Status), Queue: req.Queue, Type: req.Type, Label: req.Label,
		After: req.Cursor, Limit: req.Limit}
	if req.CreatedBefore != nil {
		f.CreatedBefore = *req.CreatedBefore
	}
	if req.Limit < 0 || req.Limit > broker.BulkLimitMax {
		return f, req.All, errorf(actors.CodeInvalidArgument, "limit must be 1..%d (0: %d)", broker.BulkLimitMax, broker.BulkLimitMax)
	}
	return f, req.All, checkFilter(f)
}

// scoped refuses a bulk action whose filter narrows nothing unless the body says all: true, so
// that a filter left out by mistake does not act on every job of the tenant. statusNarrows
// says whether the filter's status narrows the jobs the action takes at all.
func scoped(f projections.JobFilter, statusNarrows, all bool, everything string) error {
	// A created_before still to come takes every job there is so far: it narrows nothing.
	before := !f.CreatedBefore.IsZero() && f.CreatedBefore.Before(time.Now())
	if all || f.Queue != "" || f.Type != "" || f.Label != "" || before || statusNarrows && f.Status != "" {
		return nil
	}
	fields := "queue, type, label or created_before (in the past)"
	if statusNarrows {
		fields = "queue, type, status, label or created_before (in the past)"
	}
	return errorf(actors.CodeInvalidArgument, "no filter given: name a %s, or send \"all\": true to %s", fields, everything)
}

// cancelMatching serves POST /v1/jobs/cancel: a cancel of every live job a filter matches, a
// page at a time.
func (s *Server) cancelMatching(r *request) error {
	f, all, err := bulkFilter(r)
	if err != nil {
		return err
	}
	if f.Status.Terminal() {
		return errorf(actors.CodeInvalidArgument, "status %q: only queued, scheduled and leased jobs can be cancelled", f.Status)
	}
	if err := scoped(f, true, all, "cancel every live job"); err != nil {
		return err
	}
	res, err := r.b.CancelMatching(r.Context(), r.by.tenant, r.by.apiKeyID, f)
	if err != nil {
		return err
	}
	out := wire.BulkCancelResponse{Matched: res.Matched, Cancelled: res.Done - res.CancelRequested, CancelRequested: res.CancelRequested,
		Skipped: skippedOf(res), NextCursor: res.NextCursor}
	if res.Receipt.Seq != 0 {
		out.Receipt = new(receipt(res.Receipt))
	}
	return r.reply(http.StatusOK, out)
}

// redriveMatching serves POST /v1/jobs/retry: a re-drive of every dead letter a filter
// matches, a page at a time.
func (s *Server) redriveMatching(r *request) error {
	f, all, err := bulkFilter(r)
	if err != nil {
		return err
	}
	if f.Status != "" && f.Status != projections.StatusFailed {
		return errorf(actors.CodeInvalidArgument, "status %q: only failed (dead-lettered) jobs can be re-driven", f.Status)
	}
	if err := scoped(f, false, all, "re-drive every dead letter"); err != nil {
		return err
	}
	res, err := r.b.RedriveMatching(r.Context(), r.by.tenant, r.by.apiKeyID, f)
	if err != nil {
		return err
	}
	out := wire.BulkRedriveResponse{Matched: res.Matched, Redriven: res.Done, Skipped: skippedOf(res), NextCursor: res.NextCursor}
	if res.Receipt.Seq != 0 {
		out.Receipt = new(receipt(res.Receipt))
	}
	return r.reply(http.StatusOK, out)
}

func skippedOf(b broker.Bulk) map[string]int {
	out := make(map[string]int, len(b.Skipped))
	for code, n := range b.Skipped {
		out[string(code)] = n
	}
	return out
}

func (s *Server) cancelJob(r *request) error {
	rc, err := r.b.Cancel(r.Context(), r.by.tenant, r.by.apiKeyID, r.PathValue("id"))
	if err != nil {
		return err
	}
	return s.replyJob(r, rc)
}

func (s *Server) retryJob(r *request) error {
	rc, err := r.b.Retry(r.Context(), r.by.tenant, r.by.apiKeyID, r.PathValue("id"))
	if err != nil {
		return err
	}
	return s.replyJob(r, rc)
}

func (s *Server) deleteJob(r *request) error {
	rc, err := r.b.Delete(r.Context(), r.by.tenant, r.by.apiKeyID, r.PathValue("id"))
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.Deleted{ID: r.PathValue("id"), Deleted: true, Receipt: new(receipt(rc))})
}

// purgeDead serves POST /v1/dead-letters/purge.
func (s *Server) purgeDead(r *request) error {
	var req wire.PurgeRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	age := 0.0
	switch {
	case req.OlderThanSeconds != nil:
		age = *req.OlderThanSeconds
	case !req.All: // an age left out by mistake must not purge every dead letter
		return errorf(actors.CodeInvalidArgument, "older_than_seconds is required (0: any age), or send \"all\": true to purge dead letters of any age")
	}
	if age < 0 || age > actors.ResultTTLMax.Seconds() {
		return errorf(actors.CodeInvalidArgument, "older_than_seconds must be 0..%.0f", actors.ResultTTLMax.Seconds())
	}
	n, more, rc, err := r.b.PurgeDead(r.Context(), r.by.tenant, r.by.apiKeyID, req.Queue, s.clock().Add(-seconds(age)))
	if err != nil {
		return err
	}
	out := wire.PurgeResponse{Purged: n, More: more}
	if n > 0 {
		out.Receipt = new(receipt(rc))
	}
	return r.reply(http.StatusOK, out)
}

// replyJob answers a request that changed a job with the job and the receipt.
func (s *Server) replyJob(r *request, rc actors.Receipt) error {
	j, ok := r.b.Get(r.by.tenant, r.PathValue("id"))
	if !ok {
		return notFound(r.b, r.by.tenant, r.PathValue("id"))
	}
	out := liveJob(r.b, j, s.clock())
	out.Receipt = new(receipt(rc))
	return r.reply(http.StatusOK, out)
}

func (s *Server) reserve(r *request) error {
	var req wire.ReservationRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	ttl, err := secondsField("ttl_seconds", req.TTLSeconds, 0, actors.ReservationTTLMax)
	if err != nil {
		return err
	}
	id, exp, rc, err := r.b.Reserve(r.Context(), r.by.tenant, ttl)
	if err != nil {
		return err
	}
	return r.reply(http.StatusCreated, wire.Reservation{ID: id, ExpiresAt: exp, Receipt: receipt(rc)})
}

func (s *Server) release(r *request) error {
	rc, err := r.b.Release(r.Context(), r.by.tenant, r.PathValue("id"))
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.Done{Receipt: receipt(rc)})
}

func (s *Server) quota(r *request) error { return r.reply(http.StatusOK, quotaOf(r.b, r.by.tenant)) }

func quotaOf(b Core, tenant string) wire.Quota {
	q := b.Quota(tenant)
	return wire.Quota{Tenant: tenant, MaxActive: q.MaxActive, MaxRunning: q.MaxRunning, Active: q.Active, Running: q.Running,
		Reservations: len(q.Reservations), MaxRunningPerKey: q.MaxRunningPerKey}
}

func (s *Server) queues(r *request) error {
	var stats []projections.QueueStats
	var throughput [][]projections.MinuteCounts
	now := s.clock()
	r.b.Read(func(set *projections.Set) {
		stats = set.Queues(r.by.tenant, now)
		for _, q := range stats {
			throughput = append(throughput, set.QueueThroughput(r.by.tenant, q.Queue, now))
		}
	})
	out := wire.Queues{Queues: make([]wire.Queue, len(stats))}
	for i, q := range stats {
		w := wire.Queue{Name: q.Queue, Depth: q.Depth, Leased: q.Leased, Scheduled: q.Scheduled, Dead: q.Dead, OldestAgeSeconds: q.OldestAge.Seconds(),
			SucceededPerMinute: make([]int, len(throughput[i])), FailedPerMinute: make([]int, len(throughput[i]))}
		if !q.PausedSince.IsZero() {
			w.Paused, w.PausedSince = true, new(q.PausedSince)
		}
		w.MaxRunningPerKey, w.OwnKeyLimit = q.MaxRunningPerKey, q.OwnKeyLimit
		for m, c := range throughput[i] {
			w.SucceededPerMinute[m], w.FailedPerMinute[m] = c.Succeeded, c.Failed
		}
		out.Queues[i] = w
	}
	return r.reply(http.StatusOK, out)
}

// queueTenant is the tenant whose queue a request names: the caller's, or on the admin's route
// /v1/admin/tenants/{tenant}/queues/{name} the path's.
func queueTenant(r *request) (string, error) {
	t := r.PathValue("tenant")
	if t == "" {
		return r.by.tenant, nil
	}
	if !actors.ValidTenant(t) {
		return "", errorf(actors.CodeInvalidArgument, "tenant %q is not a valid tenant name", clip(t))
	}
	return t, nil
}

// pauseQueue serves POST /v1/queues/{name}/pause and /resume, and their admin twins under
// /v1/admin/tenants/{tenant}/queues/{name}.
func (s *Server) pauseQueue(paused bool) func(*request) error {
	return func(r *request) error {
		tenant, err := queueTenant(r)
		if err != nil {
			return err
		}
		queue := r.PathValue("name")
		rc, err := r.b.PauseQueue(r.Context(), tenant, r.by.apiKeyID, queue, paused)
		if err != nil {
			return err
		}
		out := wire.QueueState{Queue: queue}
		r.b.Read(func(set *projections.Set) {
			if p, ok := set.Paused(tenant, queue); ok {
				out.Paused, out.PausedSince = true, new(p.Since)
			}
		})
		if rc.Seq != 0 {
			out.Receipt = new(receipt(rc))
		}
		return r.reply(http.StatusOK, out)
	}
}

// queueLimits serves PUT and DELETE /v1/queues/{name}/limits, and their admin twins under
// /v1/admin/tenants/{tenant}/queues/{name}: the queue's own max_running_per_key, set or
// cleared (the tenant's applies again).
func (s *Server) queueLimits(clear bool) func(*request) error {
	return func(r *request) error {
		tenant, err := queueTenant(r)
		if err != nil {
			return err
		}
		queue := r.PathValue("name")
		var req wire.QueueLimitsRequest
		if !clear {
			if err := r.decode(SmallBodyBytesMax, &req); err != nil {
				return err
			}
		}
		rc, err := r.b.SetKeyLimit(r.Context(), tenant, r.by.apiKeyID, queue, req.MaxRunningPerKey)
		if err != nil {
			return err
		}
		t := r.b.Quota(tenant)
		_, own := t.QueueKeyLimits[queue]
		return r.reply(http.StatusOK, wire.QueueLimits{Queue: queue, MaxRunningPerKey: t.KeyLimit(queue), OwnKeyLimit: own, Receipt: new(receipt(rc))})
	}
}

// OfflineListedFor is how long GET /v1/workers lists a worker that went offline, unless asked
// for all=true (seed 003's worker TTL).
const OfflineListedFor = 24 * time.Hour

func (s *Server) workers(r *request) error {
	all := false
	switch v := r.URL.Query().Get("all"); v {
	case "", "false", "0":
	case "true", "1":
		all = true
	default:
		return invalid("all is true or false, not %q", clip(v))
	}
	var views []projections.WorkerView
	r.b.Read(func(set *projections.Set) { views = set.Workers(r.by.tenant) })
	now := s.clock()
	out := wire.Workers{Workers: make([]wire.Worker, 0, len(views))}
	for _, v := range views {
		lastSeen := v.LastSeen
		if live := r.b.LastSeen(v.ID); live.After(lastSeen) {
			lastSeen = live
		}
		if !all && (v.Status == "revoked" || (v.Status == "offline" && now.Sub(lastSeen) > OfflineListedFor)) {
			continue
		}
		w := wire.Worker{ID: v.ID, Name: v.Name, Queues: v.Queues, Capacity: v.Capacity, Labels: v.Labels, Status: v.Status,
			InFlight: v.InFlight, LastSeen: lastSeen, RegisteredAt: v.RegisteredAt, ExpiresAt: v.ExpiresAt, HasKey: v.PublicKey != ""}
		if v.Session != nil {
			w.Transport = v.Session.Transport
		}
		if w.InFlight == nil {
			w.InFlight = []string{}
		}
		out.Workers = append(out.Workers, w)
	}
	return r.reply(http.StatusOK, out)
}

func (s *Server) register(r *request) error {
	var req wire.RegisterRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	reg, err := r.b.RegisterWorker(r.Context(), r.by.tenant, broker.WorkerSpec{
		Name: req.Name, Queues: req.Queues, Capacity: req.Capacity, PublicKey: req.PublicKey, Labels: req.Labels, EnrollTokenID: r.by.enrollID,
	})
	if err != nil {
		return err
	}
	return r.reply(http.StatusCreated, wire.Registration{WorkerID: reg.WorkerID, WorkerToken: reg.Token, ExpiresAt: reg.ExpiresAt, Receipt: receipt(reg.Receipt)})
}

// revokeWorker revokes a worker by an API key of its tenant, or by the admin.
func (s *Server) revokeWorker(r *request) error {
	id := r.PathValue("id")
	tenant := r.by.tenant
	if r.by.admin {
		var w projections.Worker
		var ok bool
		r.b.Read(func(set *projections.Set) { w, ok = set.Worker(id) })
		if !ok {
			return errorf(actors.CodeWorkerNotFound, "no worker %q", clip(id))
		}
		tenant = w.Tenant
	}
	rc, err := r.b.RevokeWorker(r.Context(), tenant, id, r.by.by())
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.Done{Receipt: receipt(rc)})
}

func (s *Server) createAPIKey(r *request) error {
	var req wire.APIKeyRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	k, err := r.b.CreateAPIKey(r.Context(), req.Tenant)
	if err != nil {
		return err
	}
	return r.reply(http.StatusCreated, wire.APIKey{ID: k.ID, Tenant: req.Tenant, Key: k.Key, Receipt: receipt(k.Receipt)})
}

func (s *Server) revokeAPIKey(r *request) error {
	rc, err := r.b.RevokeAPIKey(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.Done{Receipt: receipt(rc)})
}

func (s *Server) createEnrollToken(r *request) error {
	var req wire.EnrollTokenRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	uses := 1
	if req.Uses != nil {
		uses = *req.Uses // the tenant's actor refuses what is outside its range
	}
	ttl, err := secondsField("ttl_seconds", req.TTLSeconds, 0, actors.EnrollTTLMax)
	if err != nil {
		return err
	}
	t, err := r.b.CreateEnrollToken(r.Context(), req.Tenant, uses, ttl)
	if err != nil {
		return err
	}
	return r.reply(http.StatusCreated, wire.EnrollToken{ID: t.ID, Tenant: req.Tenant, Token: t.Token, Uses: uses, ExpiresAt: t.ExpiresAt, Receipt: receipt(t.Receipt)})
}

func (s *Server) setQuota(r *request) error {
	var req wire.QuotaRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	tenant := r.PathValue("tenant")
	if !actors.ValidTenant(tenant) {
		return errorf(actors.CodeInvalidArgument, "tenant %q is not a valid tenant name", clip(tenant))
	}
	// A quota and a key limit are two decisions (the tenant's and the dispatcher's), applied in
	// that order, each durable before the answer; what either would refuse is refused before
	// both, so a refusal changes nothing, and the request is safe to repeat.
	if r := actors.CheckKeyLimit(req.MaxRunningPerKey); r != nil {
		return r
	}
	var rc actors.Receipt
	var err error
	if req.MaxActive != nil || req.MaxRunning != nil || req.MaxRunningPerKey == nil {
		if rc, err = r.b.SetQuota(r.Context(), tenant, req.MaxActive, req.MaxRunning); err != nil { // a limit left out keeps its value
			return err
		}
	}
	if req.MaxRunningPerKey != nil {
		if rc, err = r.b.SetKeyLimit(r.Context(), tenant, "", "", req.MaxRunningPerKey); err != nil {
			return err
		}
	}
	out := quotaOf(r.b, tenant)
	out.Receipt = new(receipt(rc))
	return r.reply(http.StatusOK, out)
}

// clip shortens what a client sent before it goes into a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
