// Command tether is the tether binary: one process that runs the broker, and the tools around it.
// This file is wiring only: subcommands, flags and their TETHER_* environment twins, the logger.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

var commands = []struct {
	name, summary string
	run           func(args []string) error
}{
	{"server", "run the broker on a data directory", runServer},
	{"worker", "run a command for every job (also: worker register, worker keygen)", runWorker},
	{"job", "submit, get, ls, cancel, retry, watch jobs", runJob},
	{"admin", "API keys, enroll tokens, quotas", runAdmin},
	{"bench", "load-generate against a running server", runBench},
	{"replay", "audit a stopped server's data dir: verify, history, state, export, receipt", runReplay},
	{"sim", "run the deterministic simulator over seeds, with faults, checking invariants", runSim},
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		return
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			if err := c.run(os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "tether %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "tether: unknown command %q\n\n", os.Args[1])
	usage()
	os.Exit(2)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: tether <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(os.Stderr, "\nEvery flag --some-name can also be set as TETHER_SOME_NAME.")
}

// parseFlags parses args, then fills every flag not given on the command line from its
// environment twin: --log-level ↔ TETHER_LOG_LEVEL.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := "TETHER_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !set[f.Name] && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", env, v, e)
			}
		}
	})
	return err
}

// logFlags are the logging flags every long-running command takes.
type logFlags struct{ format, level string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "auto", "log format: json, text, or auto (text on a terminal, else json)")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
}

func (l *logFlags) logger() (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(l.level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
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
