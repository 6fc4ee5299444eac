package cli

import (
	"errors"
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tetherhq/tether/transport/wire"
)

// A flag on the command line beats its TETHER_* twin, which beats the default.
func TestParseFlagsEnvironmentTwins(t *testing.T) {
	t.Setenv("TETHER_DATA", "/from/env")
	t.Setenv("TETHER_LOG_LEVEL", "debug")
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	data := fs.String("data", "default-data", "")
	addr := fs.String("addr", "default-addr", "")
	level := fs.String("log-level", "info", "")
	if err := ParseFlags(fs, []string{"--data", "/from/flag"}); err != nil {
		t.Fatal(err)
	}
	if *data != "/from/flag" || *level != "debug" || *addr != "default-addr" {
		t.Fatalf("data=%q log-level=%q addr=%q; want the flag, the env twin, the default", *data, *level, *addr)
	}
}

func TestParseFlagsRejectsBadEnvironment(t *testing.T) {
	t.Setenv("TETHER_WORKERS", "many")
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("workers", 1, "")
	if err := ParseFlags(fs, nil); err == nil {
		t.Fatal("TETHER_WORKERS=many accepted for an int flag")
	}
}

func TestLoggerFlags(t *testing.T) {
	for _, tc := range []struct {
		format, level string
		ok            bool
	}{
		{"json", "info", true},
		{"text", "debug", true},
		{"auto", "warn", true},
		{"xml", "info", false},
		{"json", "loud", false},
	} {
		_, err := (&LogFlags{format: tc.format, level: tc.level}).Logger()
		if (err == nil) != tc.ok {
			t.Errorf("--log-format=%s --log-level=%s: err=%v, want ok=%v", tc.format, tc.level, err, tc.ok)
		}
	}
}

// No flag may read the TETHER_JOB_* variables a worker gives each job's program: a flag named
// job-* is refused as soon as its command parses.
func TestNoFlagReadsTheJobsVariables(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("job-id", "", "")
	defer func() {
		if recover() == nil {
			t.Fatal("a flag in the jobs' namespace was accepted")
		}
	}()
	_ = ParseFlags(fs, []string{"--help"})
}

// A repeated submit whose flow has expired is said to be so, not shown as an empty file.
func TestShowExpiredFlow(t *testing.T) {
	hit := true
	out := showFlow(&wire.Flow{ID: "01JFLOW", Name: "once", Status: wire.FlowExpired, IdempotentHit: &hit, Steps: map[string]wire.FlowStep{}})
	for _, want := range []string{"flow 01JFLOW  once  expired  (submitted before with this idempotency key)", "has left every view"} {
		if !strings.Contains(out, want) {
			t.Fatalf("an expired flow: want %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "file:") || strings.Contains(out, "STEP") {
		t.Fatalf("an expired flow shown with what is not known of it:\n%s", out)
	}
}

// A waiting step shows the steps it needs that have not finished.
func TestShowFlowWaitingFor(t *testing.T) {
	out := showFlow(&wire.Flow{ID: "01JFLOW", Name: "diamond", Status: "running", Steps: map[string]wire.FlowStep{
		"a": {Status: "leased", JobID: "01JA"},
		"b": {Status: "succeeded", JobID: "01JB"},
		"c": {Status: "waiting", Needs: []string{"a", "b"}, WaitingFor: []string{"a"}},
	}})
	lines := strings.Split(out, "\n")
	if !strings.Contains(lines[2], "WAITING FOR") || !slices.Equal(strings.Fields(lines[5]), []string{"c", "waiting", "-", "a,b", "a"}) {
		t.Fatalf("flow get: want step c waiting for a in\n%s", out)
	}
}

// docs/errors.md lists the command line's own codes, every one and no other.
func TestErrorsDocListsTheCommandLinesCodes(t *testing.T) {
	doc, err := os.ReadFile("../../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(CLI_[A-Z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		listed = append(listed, m[1])
	}
	if !slices.Equal(listed, cliCodes) {
		t.Fatalf("docs/errors.md lists %v; the command line's codes are %v", listed, cliCodes)
	}
}

// A label given twice is refused, a usage error, not the last one taken silently.
func TestLabelGivenTwice(t *testing.T) {
	fs := flag.NewFlagSet("job submit", flag.ContinueOnError)
	labels := labelFlags{}
	fs.Var(labels, "label", "")
	err := ParseFlagsEnv(fs, []string{"--label", "a=b", "--label", "a=c"}, func(string) (string, bool) { return "", false })
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `label "a" is given twice ("b" and "c")`) {
		t.Fatalf("%v", err)
	}
}

// A command of flags only refuses a word among them, and a command that runs another takes it
// only after --: Go's flag package stops at the word and would drop the flags after it.
func TestStrayWordRefused(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("sim", flag.ContinueOnError)
		fs.Int("seed", 1, "")
		return fs
	}
	var ue *UsageError
	if err := ParseFlagsEnv(newFS(), []string{"--seed", "2", "stray", "--seed", "7"}, none); !errors.As(err, &ue) || !strings.Contains(err.Error(), `unexpected argument "stray"`) {
		t.Fatalf("flags only: %v", err)
	}
	if _, err := ParseCommand(newFS(), []string{"stray", "--", "cat"}, "U"); !errors.As(err, &ue) || !strings.Contains(err.Error(), `unexpected argument "stray": the command goes after --`) {
		t.Fatalf("a command before --: %v", err)
	}
	if argv, err := ParseCommand(newFS(), []string{"--seed", "2", "--", "cat", "--seed"}, "U"); err != nil || !slices.Equal(argv, []string{"cat", "--seed"}) {
		t.Fatalf("a command after --: %v %v", argv, err)
	}
}
