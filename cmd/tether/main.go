// Command tether is the tether binary: one process that runs the broker, and the tools around it.
// This file is wiring only: subcommands, flags and their TETHER_* environment twins, the logger.
package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

var commands = []struct {
	name, summary string
	run           func(args []string) error
}{
	{"server", "run the broker on a data directory", runServer},
	{"worker", "run a command for every job (also: worker register, worker keygen)", runWorker},
	{"job", "submit, get, ls, cancel, retry, watch jobs", runJob},
	{"queue", "list queues; pause and resume one", runQueue},
	{"flow", "submit, get, ls, watch, cancel flows (YAML DAGs of jobs)", runFlow},
	{"schedule", "create, get, ls, pause, resume, delete cron schedules of jobs", runSchedule},
	{"admin", "API keys, enroll tokens, quotas", runAdmin},
	{"bench", "load-generate against a running server", runBench},
	{"replay", "audit a stopped server's data dir: verify, history, state, export, receipt", runReplay},
	{"sim", "run the deterministic simulator over seeds, with faults, checking invariants", runSim},
}

// atExit are what a command leaves to be done once it returns: removing a temporary copy.
var atExit []func()

// Exit statuses, as the shell's own tools have them: 1 for a failure, 2 for a command line
// that is wrong, with the usage on stderr; --help is no error, and prints to stdout.
func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:])
		for _, f := range atExit {
			f()
		}
		if err == nil || errors.Is(err, errHelpShown) {
			return 0
		}
		var ue *usageError
		code := 1
		if errors.As(err, &ue) {
			code = 2
		}
		switch {
		case jsonAsked(args[1:]):
			_ = json.NewEncoder(stderr).Encode(wire.Error{Error: errorObject(err)})
		case ue != nil:
			fmt.Fprintf(stderr, "tether %s: %v\n\n", ue.command, err)
			ue.usage(stderr)
		default:
			fmt.Fprintf(stderr, "tether %s: %v\n", c.name, err)
		}
		return code
	}
	if jsonAsked(args[1:]) {
		unknown := &usageError{command: "", err: fmt.Errorf("unknown command %q", args[0])}
		_ = json.NewEncoder(stderr).Encode(wire.Error{Error: errorObject(unknown)})
		return 2
	}
	fmt.Fprintf(stderr, "tether: unknown command %q\n\n", args[0])
	printUsage(stderr)
	return 2
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: tether <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nEvery flag --some-name can also be set as TETHER_SOME_NAME.")
}

// commandFlags are the flags of the command that ran, as far as they were parsed: main reads
// --json there to print the command's error as JSON too.
var commandFlags *flag.FlagSet

// jsonAsked reports whether the command that ran with args asked for JSON: its --json flag,
// or its TETHER_JSON twin. A mistake may stop the parsing before --json is read, and a
// mistyped subcommand parses no flags at all: then args say it.
func jsonAsked(args []string) bool {
	if commandFlags != nil {
		f := commandFlags.Lookup("json")
		if f == nil {
			return false // a command that prints no JSON
		}
		if f.Value.String() == "true" {
			return true
		}
	}
	asked, _ := strconv.ParseBool(os.Getenv(envTwin("json")))
	for _, a := range args {
		if a == "--" {
			break
		}
		if name, value, given := strings.Cut(strings.TrimLeft(a, "-"), "="); strings.HasPrefix(a, "-") && name == "json" {
			asked = !given
			if given {
				asked, _ = strconv.ParseBool(value)
			}
		}
	}
	return asked
}

// Codes of the errors the command line finds itself, which --json prints as the server prints
// its own; docs/errors.md lists them. An answer that is not tether's (a proxy's) has the code
// HTTP_<status>, as the client package gives it.
const (
	codeUsage              = "CLI_USAGE"
	codeUnreachable        = "CLI_UNREACHABLE"
	codeCertificateRefused = "CLI_CERTIFICATE_REFUSED"
	codeNotSucceeded       = "CLI_NOT_SUCCEEDED"
	codeFailed             = "CLI_ERROR"
)

// cliCodes are the command line's own codes.
var cliCodes = []string{codeUsage, codeUnreachable, codeCertificateRefused, codeNotSucceeded, codeFailed}

// errorObject is err as the server's error object: the server's own when it refused, else the
// command line's code and the error's text.
func errorObject(err error) wire.ErrorDetail {
	e := wire.ErrorDetail{Code: codeFailed, Message: err.Error(), Details: map[string]any{}}
	var refused *client.Error
	if errors.As(err, &refused) {
		e = wire.ErrorDetail{Code: refused.Code, Message: refused.Message, Details: refused.Details, RequestID: refused.RequestID}
		if e.Details == nil {
			e.Details = map[string]any{}
		}
		return e
	}
	var ue *usageError
	var ended *endedError
	var noAnswer *url.Error
	var netErr *net.OpError
	switch {
	case errors.As(err, &ue):
		e.Code = codeUsage
	case client.CertificateRefused(err):
		e.Code = codeCertificateRefused
	case errors.As(err, &noAnswer), errors.As(err, &netErr):
		e.Code = codeUnreachable
	case errors.As(err, &ended):
		e.Code, e.Details = codeNotSucceeded, map[string]any{"status": ended.status}
	}
	return e
}

// errHelpShown is what a command returns after --help printed its usage: not a failure.
var errHelpShown = errors.New("help shown")

// usageError is a mistake on the command line: main says it, then prints the usage, and
// exits 2.
type usageError struct {
	command string // "job get"
	err     error
	usage   func(io.Writer)
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// badFlag marks err as a mistake in fs's flags or arguments.
func badFlag(fs *flag.FlagSet, err error) error {
	return &usageError{command: fs.Name(), err: err, usage: func(w io.Writer) { printFlags(w, fs) }}
}

// badFlagf is badFlag with a formatted message.
func badFlagf(fs *flag.FlagSet, format string, args ...any) error {
	return badFlag(fs, fmt.Errorf(format, args...))
}

func printFlags(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage of tether %s:\n", fs.Name())
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintln(w, "\nEvery flag --some-name can also be set as TETHER_SOME_NAME.")
}

// parse parses args with fs: a mistake is a usage error; --help prints the usage to stdout.
func parse(fs *flag.FlagSet, args []string) error {
	fs.VisitAll(func(f *flag.Flag) {
		if env := envTwin(f.Name); strings.HasPrefix(env, jobEnvPrefix) {
			panic("tether: flag --" + f.Name + " would read the jobs' own variables, " + env)
		}
	})
	fs.SetOutput(io.Discard)
	commandFlags = fs
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		printFlags(os.Stdout, fs)
		return errHelpShown
	case err != nil:
		return badFlag(fs, err)
	}
	return nil
}

// jobEnvPrefix is the namespace of the variables a worker gives each job's program
// (client.JobEnv): no flag reads it, so a job that runs tether is not steered by them.
const jobEnvPrefix = "TETHER_JOB_"

// parseFlags parses args, then fills every flag not given on the command line from its
// environment twin: --log-level ↔ TETHER_LOG_LEVEL.
func parseFlags(fs *flag.FlagSet, args []string) error {
	return parseFlagsEnv(fs, args, os.LookupEnv)
}

// parseFlagsEnv is parseFlags with the environment read through lookupEnv.
func parseFlagsEnv(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := envTwin(f.Name)
		if v, ok := lookupEnv(env); ok && !set[f.Name] && err == nil {
			if e := fs.Set(f.Name, v); e != nil { // Set, not f.Value.Set: fs.Visit sees it as given
				err = badFlagf(fs, "%s=%q: %w", env, v, e)
			}
		}
	})
	return err
}

// envTwin is the environment variable that sets a flag: --log-level ↔ TETHER_LOG_LEVEL.
func envTwin(flagName string) string {
	return "TETHER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// defaultServer is where client commands find a server unless told otherwise.
const defaultServer = "http://127.0.0.1:8080"

// serverURL is the value of a --server flag: an http(s) URL; a bare host:port means
// http://host:port.
type serverURL string

func (s *serverURL) String() string { return string(*s) }

// Set takes one server URL, or several separated by commas (a replicated log's leader and
// standbys, in any order).
func (s *serverURL) Set(v string) error {
	var urls []string
	for raw := range strings.SplitSeq(v, ",") {
		one := strings.TrimSpace(raw)
		bare := !strings.Contains(one, "://") // host:port; a slash in it is a mistyped scheme ("htp:/host")
		if bare {
			one = "http://" + one
		}
		u, err := url.Parse(one)
		if err != nil || (bare && strings.Contains(raw, "/")) || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%q is not a server URL: want http(s)://host:port, or host:port, or several separated by commas", raw)
		}
		urls = append(urls, strings.TrimRight(u.String(), "/"))
	}
	*s = serverURL(strings.Join(urls, ","))
	return nil
}

// serverVar defines a --server flag.
func serverVar(fs *flag.FlagSet, p *string) {
	*p = defaultServer
	fs.Var((*serverURL)(p), "server", "the server's URL (host:port means http://host:port); a replicated log's servers separated by commas, and the leader is found among them")
}

// logFlags are the logging flags every long-running command takes.
type logFlags struct{ format, level string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "auto", "log format: json, text, or auto (text on a terminal, else json)")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
}

// check refuses a level or a format the logger would not take.
func (l *logFlags) check() error {
	if _, err := zapcore.ParseLevel(l.level); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	switch l.format {
	case "json", "text", "auto":
		return nil
	}
	return fmt.Errorf("--log-format %q: want json, text or auto", l.format)
}

func (l *logFlags) logger() (*zap.Logger, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	level, _ := zapcore.ParseLevel(l.level)
	format := l.format
	if format == "auto" {
		format = "json"
		if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			format = "text"
		}
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
	case "text":
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
	default:
		return nil, fmt.Errorf("--log-format %q: want json, text or auto", l.format)
	}
	cfg.Level = zap.NewAtomicLevelAt(level)
	cfg.EncoderConfig.TimeKey = "time"
	cfg.EncoderConfig.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	return cfg.Build()
}

// caCert is the value of a --ca-cert flag: a PEM file of a private CA that the server's
// certificate is verified against, besides the system's roots. It is read when the flag is set.
type caCert struct {
	file   string
	config *tls.Config // nil: the system's roots only
}

func (c *caCert) String() string { return c.file }

func (c *caCert) Set(v string) error {
	config, err := client.TLSConfigWithCA(v)
	if err != nil {
		return err
	}
	c.file, c.config = v, config
	return nil
}

func (c *caCert) register(fs *flag.FlagSet) {
	fs.Var(c, "ca-cert", "a PEM file of the private CA that signed the server's certificate (https only; the system's roots are trusted too)")
}

// httpClient is an HTTP client that verifies the server's certificate against c.
func (c *caCert) httpClient() *http.Client { return client.NewHTTPClient(c.config) }
