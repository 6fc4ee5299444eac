package audit

// SpillAt lets a test make a Fold spill after every few jobs.
var SpillAt = &spillAt
