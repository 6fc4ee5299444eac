package longpoll

// A planted bug for the simulator's self-check (make sim-mutants): false unless the build
// carries its tag (mutant_*.go). The simulator drives this machine, so it must catch it.
var (
	// mutantKeepsOffer answers a poll that ends without withdrawing its offer, as a poll that
	// forgot the offer would: the worker's credit outlives the poll, and jobs are leased to a
	// worker that is not asking.
	mutantKeepsOffer bool
)
