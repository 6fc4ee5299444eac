package actors

// Planted bugs for the simulator's self-check (make sim-mutants): each is false unless the
// build carries its tag (mutant_*.go), so no real build has one. The simulator must catch every
// one of them; a mutant it cannot catch is a hole in its invariants.
var (
	// mutantAckBeforeFsync answers a submit as soon as it is decided.
	mutantAckBeforeFsync bool
	// mutantLeaseBeforeFsync sends an assignment before its lease is durable.
	mutantLeaseBeforeFsync bool
	// mutantSkipLeaseCheck accepts a worker's operation whatever lease_id it names.
	mutantSkipLeaseCheck bool
	// mutantSkipNonceCheck accepts a completion whatever nonce it carries.
	mutantSkipNonceCheck bool
	// mutantReleaseTwice keeps a released reservation active, so it can end again.
	mutantReleaseTwice bool
	// mutantMapOrder leases the first ready job in map iteration order, not the best one.
	mutantMapOrder bool
	// mutantCreditOutlivesPoll keeps a long poll's credit after the poll ended, as tether did
	// before offers: jobs are leased to a worker that is not asking.
	mutantCreditOutlivesPoll bool
	// mutantHeartbeatFixed tells workers to heartbeat every HeartbeatInterval whatever their
	// leases' lease_ttl, as tether did before HeartbeatIntervalFor.
	mutantHeartbeatFixed bool
	// mutantProgressTwice writes a worker's repeated event again, as tether did before events
	// were numbered.
	mutantProgressTwice bool
	// mutantExpireEarly expires finished jobs a retention early.
	mutantExpireEarly bool
	// mutantDeleteLive deletes a job whatever its status.
	mutantDeleteLive bool
	// mutantIgnorePause leases jobs from paused queues.
	mutantIgnorePause bool
	// mutantKeyLimitOffByOne lets a concurrency key hold one lease more than its limit.
	mutantKeyLimitOffByOne bool
	// mutantExplainIgnoresKeys explains a job its key holds back as if its key were free.
	mutantExplainIgnoresKeys bool
	// mutantBucketRefillsTwice charges a lease half a token: a rate limit's bucket refills
	// twice as fast as its rate.
	mutantBucketRefillsTwice bool
	// mutantStarveTenants serves one tenant a dispatch: the others' sessions wait for the next
	// message, though they have credit and ready jobs.
	mutantStarveTenants bool
	// mutantStartOnLease starts a flow's step once each step it needs is leased or succeeded.
	mutantStartOnLease bool
	// mutantForgetDecidedTicks takes a schedule's ticks from its creation on, forgetting those
	// the log says it decided (and a resume).
	mutantForgetDecidedTicks bool
	// mutantFireOverlapping fires a schedule with overlap: skip while its last job is live.
	mutantFireOverlapping bool
	// mutantCompleteAfterCancel lets a completion that comes after a cancel was asked for
	// succeed the job, as tether did before a cancel won.
	mutantCompleteAfterCancel bool
	// mutantIgnoreStall expires a lease whose timer comes due while the server is stalled as
	// soon as it runs again, before it reads the heartbeats that waited in its sockets.
	mutantIgnoreStall bool
	// mutantKeepUnacknowledged keeps a lease made before a restart that its worker does not
	// hold until it runs out, spending an attempt on a job that never ran.
	mutantKeepUnacknowledged bool
)
