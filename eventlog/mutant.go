package eventlog

// Planted bugs for the simulator's self-check (make sim-mutants): each is false unless the
// build carries its tag (mutant_*.go). The simulator runs this log on its model of a JetStream
// stream, so it must catch them as it catches the behaviours' (actors/mutant.go).
var (
	// mutantPipelinePublishes publishes up to four messages on an upstream without waiting
	// for the ones before them, each expecting the number the one before will get: a number a
	// deposed leader's pipeline predicts alike for a new leader's message, so its publish lands
	// after the new leader's, and the upstream holds a message that does not continue the
	// chain.
	mutantPipelinePublishes bool
	// mutantStreamSkipsGaps reads a stream over an archive with segments missing as if the
	// segments here were all of it: the silent gap an audit must never show as the whole.
	mutantStreamSkipsGaps bool
)
