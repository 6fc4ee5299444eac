// Package proc reads what this process has used of the machine, for the server's
// process_cpu_seconds_total and the load generator's own CPU per job.
package proc

import "time"

// CPU returns the user and system CPU time the process has used, and false where the platform
// does not say.
func CPU() (time.Duration, bool) { return cpu() }
