package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// ErrHelpShown is what a command returns after --help printed its usage: not a failure.
var ErrHelpShown = errors.New("help shown")

// UsageError is a mistake on the command line: Run says it, then prints the usage, and
// exits 2.
type UsageError struct {
	command string // "job get"
	err     error
	usage   func(io.Writer)
}

func (e *UsageError) Error() string { return e.err.Error() }
func (e *UsageError) Unwrap() error { return e.err }

// BadFlag marks err as a mistake in fs's flags or arguments.
func BadFlag(fs *flag.FlagSet, err error) error {
	return &UsageError{command: fs.Name(), err: err, usage: func(w io.Writer) { printFlags(w, fs) }}
}

// BadFlagf is BadFlag with a formatted message.
func BadFlagf(fs *flag.FlagSet, format string, args ...any) error {
	return BadFlag(fs, fmt.Errorf(format, args...))
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
		return ErrHelpShown
	case err != nil:
		return BadFlag(fs, err)
	}
	return nil
}

// jobEnvPrefix is the namespace of the variables a worker gives each job's program
// (client.JobEnv): no flag reads it, so a job that runs tether is not steered by them.
const jobEnvPrefix = "TETHER_JOB_"

// ParseFlags parses args, then fills every flag not given on the command line from its
// environment twin: --log-level ↔ TETHER_LOG_LEVEL.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	return ParseFlagsEnv(fs, args, os.LookupEnv)
}

// ParseFlagsEnv is ParseFlags with the environment read through lookupEnv. A command that
// takes flags only refuses any other word: Go's flag package stops at the first one, and the
// flags after it would be dropped without a word.
func ParseFlagsEnv(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return BadFlagf(fs, "unexpected argument %q: tether %s takes flags only", fs.Arg(0), fs.Name())
	}
	return parseEnv(fs, lookupEnv)
}

// ParseCommand is ParseFlags for a command that runs another program: it returns what comes
// after "--", and refuses a word before it, which would otherwise be taken for the program with
// every flag after it as the program's arguments.
func ParseCommand(fs *flag.FlagSet, args []string, usage string) ([]string, error) {
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	rest := fs.Args()
	if consumed := args[:len(args)-len(rest)]; len(rest) > 0 && (len(consumed) == 0 || consumed[len(consumed)-1] != "--") {
		return nil, BadFlagf(fs, "unexpected argument %q: the command goes after --; usage: %s", rest[0], usage)
	}
	return rest, parseEnv(fs, os.LookupEnv)
}

// parseEnv fills every flag not given on the command line from its environment twin.
func parseEnv(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := envTwin(f.Name)
		if v, ok := lookupEnv(env); ok && !set[f.Name] && err == nil {
			if e := fs.Set(f.Name, v); e != nil { // Set, not f.Value.Set: fs.Visit sees it as given
				err = BadFlagf(fs, "%s=%q: %w", env, v, e)
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

// ServerVar defines a --server flag.
func ServerVar(fs *flag.FlagSet, p *string) {
	*p = defaultServer
	fs.Var((*serverURL)(p), "server", "the server's URL (host:port means http://host:port); a replicated log's servers separated by commas, and the leader is found among them")
}

// LogFlags are the logging flags every long-running command takes.
type LogFlags struct{ format, level string }

func (l *LogFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "auto", "log format: json, text, or auto (text on a terminal, else json)")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
}

// Check refuses a level or a format the logger would not take.
func (l *LogFlags) Check() error {
	if _, err := zapcore.ParseLevel(l.level); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	switch l.format {
	case "json", "text", "auto":
		return nil
	}
	return fmt.Errorf("--log-format %q: want json, text or auto", l.format)
}

func (l *LogFlags) Logger() (*zap.Logger, error) {
	if err := l.Check(); err != nil {
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

// CACert is the value of a --ca-cert flag: a PEM file of a private CA that the server's
// certificate is verified against, besides the system's roots. It is read when the flag is set.
type CACert struct {
	file string
	TLS  *tls.Config // nil: the system's roots only
}

func (c *CACert) String() string { return c.file }

func (c *CACert) Set(v string) error {
	config, err := client.TLSConfigWithCA(v)
	if err != nil {
		return err
	}
	c.file, c.TLS = v, config
	return nil
}

func (c *CACert) Register(fs *flag.FlagSet) {
	fs.Var(c, "ca-cert", "a PEM file of the private CA that signed the server's certificate (https only; the system's roots are trusted too)")
}

// HTTPClient is an HTTP client that verifies the server's certificate against c.
func (c *CACert) HTTPClient() *http.Client { return client.NewHTTPClient(c.TLS) }

// ClientFlags are the flags of every command that talks to a server.
type ClientFlags struct {
	server, token string
	json          bool
	ca            CACert
	retryFor      time.Duration
}

func (c *ClientFlags) Register(fs *flag.FlagSet, tokenHelp string) {
	ServerVar(fs, &c.server)
	fs.StringVar(&c.token, "token", "", tokenHelp)
	fs.BoolVar(&c.json, "json", false, "print JSON instead of text")
	fs.DurationVar(&c.retryFor, "retry-for", 15*time.Second, "how long a request that is safe to repeat (a read, a submit with --idempotency-key, a cancel) is tried again while no server takes it: a server restarting, or a replicated log's failover; 0: not at all")
	c.ca.Register(fs)
}

func (c *ClientFlags) Client() *client.Client {
	cl := client.New(c.server, c.token, c.ca.HTTPClient())
	cl.RetryFor = max(c.retryFor, 0)
	return cl
}

// Print writes v as JSON with --json, else the text human returns.
func (c *ClientFlags) Print(v any, human func() string) error { return Print(c.json, v, human) }

// Print writes v as indented JSON if asJSON, else the text human returns, to stdout.
func Print(asJSON bool, v any, human func() string) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	_, err := fmt.Fprint(os.Stdout, human())
	return err
}

// ParseArgs parses flags wherever they appear among the positional arguments (`get ID --json`)
// and returns the positional ones; want is how many are required (-1: any).
func ParseArgs(fs *flag.FlagSet, args []string, want int, usage string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if err := ParseFlags(fs, nil); err != nil { // the environment twins
		return nil, err
	}
	if want >= 0 && len(pos) != want {
		return nil, BadFlagf(fs, "usage: %s", usage)
	}
	return pos, nil
}

// Subcommands runs the subcommand args[0] of a command group.
func Subcommands(group string, cmds []Command, args []string) error {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: tether %s <command> [flags]\n\ncommands:\n", group)
		for _, c := range cmds {
			fmt.Fprintf(w, "  %-13s %s\n", c.Name, c.Summary)
		}
	}
	switch {
	case len(args) == 0:
		return &UsageError{command: group, err: errors.New("no command given"), usage: usage}
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		usage(os.Stdout)
		return ErrHelpShown
	}
	for _, c := range cmds {
		if c.Name == args[0] {
			return c.Run(args[1:])
		}
	}
	return &UsageError{command: group, err: fmt.Errorf("unknown command %q", args[0]), usage: usage}
}

// labelFlags collects --label k=v.
type labelFlags map[string]string

func (l labelFlags) String() string { return "" }
func (l labelFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("a label is key=value, not %q", v)
	}
	if was, dup := l[k]; dup {
		return fmt.Errorf("label %q is given twice (%q and %q); a job has one value per label", k, was, val)
	}
	l[k] = val
	return nil
}

// rateLimitFlags are a job's --rate-limit NAME[:KEY] flags.
type rateLimitFlags []wire.RateLimitUse

func (r *rateLimitFlags) String() string { return "" }
func (r *rateLimitFlags) Set(v string) error {
	name, key, colon := strings.Cut(v, ":")
	if name == "" || colon && key == "" {
		return fmt.Errorf("a rate limit is NAME or NAME:KEY, not %q", v)
	}
	*r = append(*r, wire.RateLimitUse{Name: name, Key: key})
	return nil
}

// readArg returns s, or the contents of a file for @FILE, or stdin for @-.
func readArg(s string) ([]byte, error) {
	switch {
	case s == "@-":
		return io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
	case strings.HasPrefix(s, "@"):
		return os.ReadFile(s[1:])
	}
	return []byte(s), nil
}

// byID is a command that takes one id, asks the server with call, and prints the answer with
// show (or as JSON).
func byID[T any](name, usage string, call func(*client.Client, context.Context, string) (T, error), show func(T) string) func([]string) error {
	return func(args []string) error {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		var cf ClientFlags
		cf.Register(fs, apiKeyHelp)
		pos, err := ParseArgs(fs, args, 1, usage)
		if err != nil {
			return err
		}
		if strings.TrimSpace(pos[0]) == "" {
			return BadFlagf(fs, "the id is empty; usage: %s", usage)
		}
		v, err := call(cf.Client(), context.Background(), pos[0])
		if err != nil {
			return err
		}
		return cf.Print(v, func() string { return show(v) })
	}
}

// setFlags names the flags given on the command line or through their environment twins.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// callerTrace is the context of a submit from the command line: it continues the trace in
// TRACEPARENT, as OpenTelemetry's environment carrier says, when a traced script runs it.
func callerTrace() context.Context {
	return client.WithTraceparent(context.Background(), os.Getenv("TRACEPARENT"))
}
