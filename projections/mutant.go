package projections

// Planted bugs in the finished jobs' table, for the simulator's self-check (make sim-mutants):
// each is false unless the build carries its tag (mutant_*.go). The simulator runs this fold and
// this table on its disk, so it must catch them.
var (
	// mutantTableIndexLost stores a finished job without its status key, as a flush that wrote
	// the record and lost one index write would.
	mutantTableIndexLost bool
	// mutantStaleTableCopy forgets, at the end of a flush, that a job changed again while the
	// flush was being written, so the copy the flush stored shows through.
	mutantStaleTableCopy bool
)
