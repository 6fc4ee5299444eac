// Package cli is tether's command line over transport/client: the client commands (job,
// queue, flow, schedule, admin), what they print, and the helpers every command of the binary
// parses its flags with (flags.go).
//
// The command line's rules, which every command keeps:
//  1. Every flag --some-name has an environment twin TETHER_SOME_NAME; the command line beats
//     the twin, which beats the default. No flag reads TETHER_JOB_*, the variables a worker
//     gives each job's program.
//  2. A mistake on the command line (a UsageError) exits 2, says the mistake once and prints
//     the usage on stderr; any other failure exits 1; --help is no error and prints to stdout.
//  3. With --json (or TETHER_JSON), output is JSON, and so is an error on stderr: the server's
//     error object when it refused, else one of the command line's own codes (docs/errors.md).
//  4. Flags may come anywhere among the positional arguments (job get ID --json).
//
// cmd/tether wires the commands; the server's, the worker's and replay's flags are declared
// there, parsed with these helpers.
package cli
