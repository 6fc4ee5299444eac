package cells

// Planted bugs in the ordering rules, for the simulator's self-check (make sim-mutants): each
// is false unless the build carries its tag (mutant_*.go). The simulator runs this runtime, so
// it must catch them as it catches the behaviours' (actors/mutant.go).
var (
	// mutantPersistedBeforeDurable delivers Persisted as soon as events are handed to the log,
	// as a runtime that trusted the write and not the fsync would.
	mutantPersistedBeforeDurable bool
	// mutantApplyAfterReply delivers Persisted before the projections hold its events, which
	// they get only with the next commit, as a projection fed off the commit path would.
	mutantApplyAfterReply bool
)
