package transport

import (
	"context"
	"iter"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
)

// Core is what transport calls of the broker (actors/broker.Broker in a server): commands that
// return once their events are durable, reads of the projections, a job's stream for SSE, the
// log's figures for metrics, and workers' sessions and liveness. The event log itself is not
// here: transport reads it only through these.
type Core interface {
	// Health.
	Err() error
	Failed() <-chan struct{}
	Head() eventlog.Head
	LogStats() eventlog.Stats
	LogBytes() uint64
	StorageStats() eventlog.StorageStats
	Archive() broker.ArchiveState
	Checkpoint() (seq uint64, covers time.Time)

	// Reads of the projections.
	Read(fn func(*projections.Set))
	Get(tenant, id string) (*projections.Job, bool)
	PeekJob(id string, fn func(*projections.Job)) bool
	Expired(tenant, id string) bool
	Retention() projections.Retention
	List(f projections.JobFilter) ([]*projections.Job, bool)
	Quota(tenant string) projections.Tenant
	JobStream(jobID string, from uint64) iter.Seq2[eventlog.Record, error]
	FlowEvents(f *projections.Flow, from uint64, perStream int) ([]eventlog.Record, error)
	Changed() <-chan struct{}

	// Credentials.
	APIKeyByToken(key string) (projections.APIKey, bool)
	EnrollTokenByToken(token string) (projections.EnrollToken, bool)
	WorkerByToken(token string) (projections.Worker, bool)

	// Clients' commands.
	Submit(ctx context.Context, tenant, apiKeyID string, specs ...actors.JobSpec) ([]broker.SubmitResult, actors.Receipt, error)
	Cancel(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error)
	Retry(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error)
	Delete(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error)
	PurgeDead(ctx context.Context, tenant, apiKeyID, queue string, before time.Time) (purged int, more bool, rc actors.Receipt, err error)
	Reserve(ctx context.Context, tenant string, ttl time.Duration) (id string, expiresAt time.Time, rc actors.Receipt, err error)
	Release(ctx context.Context, tenant, id string) (actors.Receipt, error)
	CancelMatching(ctx context.Context, tenant, apiKeyID string, f projections.JobFilter) (broker.Bulk, error)
	RedriveMatching(ctx context.Context, tenant, apiKeyID string, f projections.JobFilter) (broker.Bulk, error)
	PauseQueue(ctx context.Context, tenant, apiKeyID, queue string, paused bool) (actors.Receipt, error)
	SubmitFlow(ctx context.Context, m actors.SubmitFlow) (id string, hit bool, rc actors.Receipt, err error)
	CancelFlow(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error)
	CreateSchedule(ctx context.Context, m actors.CreateSchedule) (id string, existing bool, rc actors.Receipt, err error)
	PauseSchedule(ctx context.Context, tenant, apiKeyID, id string, paused bool) (actors.Receipt, error)
	DeleteSchedule(ctx context.Context, tenant, apiKeyID, id string) (actors.Receipt, error)

	// Admin commands.
	SetQuota(ctx context.Context, tenant string, maxActive, maxRunning *int) (actors.Receipt, error)
	SetKeyLimit(ctx context.Context, tenant, apiKeyID, queue string, maxRunningPerKey *int) (actors.Receipt, error)
	Explain(ctx context.Context, tenant, jobID string) (actors.Explanation, error)
	SetRateLimit(ctx context.Context, tenant, apiKeyID, name string, rate float64, burst int) (actors.Receipt, error)
	DeleteRateLimit(ctx context.Context, tenant, apiKeyID, name string) (actors.Receipt, error)
	RateLimits(ctx context.Context, tenant string) ([]actors.RateLimitState, error)
	WaitingReasons(ctx context.Context) (actors.WaitingCounts, error)
	CreateAPIKey(ctx context.Context, tenant string) (broker.NewAPIKey, error)
	RevokeAPIKey(ctx context.Context, id string) (actors.Receipt, error)
	CreateEnrollToken(ctx context.Context, tenant string, uses int, ttl time.Duration) (broker.NewEnrollToken, error)

	// Workers.
	RegisterWorker(ctx context.Context, tenant string, spec broker.WorkerSpec) (broker.Registration, error)
	RenewWorkerToken(ctx context.Context, w projections.Worker, presented string) (broker.RenewedToken, error)
	RevokeWorker(ctx context.Context, tenant, workerID, by string) (actors.Receipt, error)
	Connect(ctx context.Context, workerID, transport string, capacity int) (*broker.Conn, error)
	Touch(workerID string, at time.Time)
	LastSeen(workerID string) time.Time
	LeaseExpiresAt(workerID, leaseID string, ttl time.Duration, logged time.Time) time.Time
	Event(ctx context.Context, p actors.Progress) (int, actors.Receipt, error)
	Report(ctx context.Context, op any) (actors.Receipt, error)
	WorkerOp(op any, done func(number int, rc actors.Receipt, err error))
	ReturnUndelivered(assignments ...actors.Assignment)
}

var _ Core = (*broker.Broker)(nil)
