package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// atExit are what a command leaves to be done once it returns: removing a temporary copy.
var atExit []func()

// AtExit has f run once the command that runs returns.
func AtExit(f func()) { atExit = append(atExit, f) }

// ExitError ends a command with Status, its error already said where the command says things:
// a server logs the error it stops on as it logs everything else (JSON under --log-format
// json), and Run prints nothing more.
type ExitError struct {
	Err    error
	Status int
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Command is a command of a binary, or a subcommand of a group of them.
type Command struct {
	Name, Summary string
	Run           func(args []string) error
}

// Run runs the command of commands that args name, and returns the exit status: 0, 1 for a
// failure, 2 for a command line that is wrong, with the usage on stderr (--help is no error,
// and prints to stdout), or an ExitError's own. An error goes to stderr, as JSON if the
// command was asked for JSON, unless it is an ExitError, which the command said itself.
func Run(commands []Command, args []string, stdout, stderr io.Writer) int {
	printUsage := func(w io.Writer) { usage(w, commands) }
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.Name != args[0] {
			continue
		}
		err := c.Run(args[1:])
		for _, f := range atExit {
			f()
		}
		if err == nil || errors.Is(err, ErrHelpShown) {
			return 0
		}
		if ee := (*ExitError)(nil); errors.As(err, &ee) {
			return ee.Status
		}
		var ue *UsageError
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
			fmt.Fprintf(stderr, "tether %s: %v\n", c.Name, err)
		}
		return code
	}
	if jsonAsked(args[1:]) {
		unknown := &UsageError{command: "", err: fmt.Errorf("unknown command %q", args[0])}
		_ = json.NewEncoder(stderr).Encode(wire.Error{Error: errorObject(unknown)})
		return 2
	}
	fmt.Fprintf(stderr, "tether: unknown command %q\n\n", args[0])
	printUsage(stderr)
	return 2
}

func usage(w io.Writer, commands []Command) {
	fmt.Fprintln(w, "usage: tether <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nEvery flag --some-name can also be set as TETHER_SOME_NAME.")
}

// commandFlags are the flags of the command that ran, as far as they were parsed: Run reads
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
	var ue *UsageError
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
