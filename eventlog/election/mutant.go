package election

// Planted bugs for the simulator's self-check (make sim-mutants): each is false unless the
// build carries its tag (mutant_*.go).
var (
	// mutantStopOnRefusedRenewal gives the lead up when a renewal is refused, as if another
	// server held the key, without reading it: a leader whose renewal landed and whose answer
	// was lost then stops, and nobody else holds the key.
	mutantStopOnRefusedRenewal bool
	// mutantStopOnUnansweredRenewal makes the Driver give the lead up, as cut off, when one
	// renewal goes unanswered, without asking the stream: a leader whose renewal or its answer
	// was lost, or whose bucket elects a raft leader, then stops while NATS answers it.
	mutantStopOnUnansweredRenewal bool
	// mutantHealthyWhileUnsure lets a leader say it leads (Healthy) as soon as NATS answers
	// it, whether or not the key is still its own: a leader paused past its TTL, resumed, says
	// it leads from its first tick until its renewal reads the claim of the server that took
	// over, beside that server.
	mutantHealthyWhileUnsure bool
)
