package election

// Planted bugs for the simulator's self-check (make sim-mutants): each is false unless the
// build carries its tag (mutant_*.go).
var (
	// mutantStopOnRefusedRenewal gives the lead up when a renewal is refused, as if another
	// server held the key, without reading it: a leader whose renewal landed and whose answer
	// was lost then stops, and nobody else holds the key.
	mutantStopOnRefusedRenewal bool
)
