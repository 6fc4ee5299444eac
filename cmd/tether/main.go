// Command tether is the tether binary: one process that runs the broker, and the tools around it.
// This file is wiring only: the commands, each a package's or a file's here; transport/cli
// parses the flags, their TETHER_* environment twins, and says the errors.
package main

import (
	"os"

	"github.com/tetherhq/tether/transport/cli"
)

var commands = []cli.Command{
	{Name: "server", Summary: "run the broker on a data directory", Run: runServer},
	{Name: "worker", Summary: "run a command for every job (also: worker register, worker keygen)", Run: runWorker},
	{Name: "job", Summary: "submit, get, ls, cancel, retry, watch jobs", Run: cli.Job},
	{Name: "queue", Summary: "list queues; pause and resume one", Run: cli.Queue},
	{Name: "ratelimit", Summary: "set, list and delete the tenant's rate limits (token buckets jobs take from)", Run: cli.RateLimit},
	{Name: "flow", Summary: "submit, get, ls, watch, cancel flows (YAML DAGs of jobs)", Run: cli.Flow},
	{Name: "schedule", Summary: "create, get, ls, pause, resume, delete cron schedules of jobs", Run: cli.Schedule},
	{Name: "admin", Summary: "API keys, enroll tokens, quotas", Run: cli.Admin},
	{Name: "bench", Summary: "load-generate against a running server", Run: runBench},
	{Name: "replay", Summary: "audit a stopped server's data dir: verify, history, state, export, receipt", Run: runReplay},
	{Name: "sim", Summary: "run the deterministic simulator over seeds, with faults, checking invariants", Run: runSim},
}

// Exit statuses, as the shell's own tools have them: 1 for a failure, 2 for a command line
// that is wrong, with the usage on stderr; --help is no error, and prints to stdout.
func main() {
	os.Exit(cli.Run(commands, os.Args[1:], os.Stdout, os.Stderr))
}
