package flowfile_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/flowfile"
)

const diamond = `
flow:
  defaults: {queue: demo, max_attempts: 3, labels: {team: ml}}
  steps:
    fetch:  {type: fetch, payload: {url: "https://example.com/data.csv"}}
    train:  {type: train, needs: [fetch], lease_ttl_seconds: 60, labels: {gpu: "1"}}
    eval:   {needs: [fetch], queue: cpu}
    report: {type: report, needs: [train, eval], continue_on_failure: true}
`

func TestParse(t *testing.T) {
	f, err := flowfile.Parse([]byte(diamond))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Steps) != 4 {
		t.Fatalf("%d steps", len(f.Steps))
	}
	byName := map[string]int{}
	for i, s := range f.Steps {
		byName[s.Name] = i
	}
	fetch, train, eval, report := f.Steps[byName["fetch"]], f.Steps[byName["train"]], f.Steps[byName["eval"]], f.Steps[byName["report"]]
	switch {
	case string(fetch.Job.Payload) != `{"url":"https://example.com/data.csv"}` || fetch.Job.Queue != "demo" || fetch.Job.MaxAttempts != 3:
		t.Fatalf("fetch %+v", fetch)
	case train.Job.LeaseTTL != time.Minute || train.Job.Labels["team"] != "ml" || train.Job.Labels["gpu"] != "1" || train.Needs[0] != "fetch":
		t.Fatalf("train %+v", train)
	case eval.Job.Type != "eval" || eval.Job.Queue != "cpu":
		t.Fatalf("eval takes its name as its type and its own queue: %+v", eval)
	case !report.ContinueOnFailure || len(report.Needs) != 2:
		t.Fatalf("report %+v", report)
	case fetch.Job.Labels["gpu"] != "":
		t.Fatal("a step's labels leaked into another's")
	}
}

// A step's rate limits, named alone or with a key, and the defaults' for the steps without.
func TestParseRateLimits(t *testing.T) {
	f, err := flowfile.Parse([]byte(`
flow:
  defaults: {queue: q, rate_limits: [api]}
  steps:
    a: {}
    b: {rate_limits: [{name: gpu, key: a100}, api]}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range f.Steps {
		got[s.Name] = fmt.Sprint(s.Job.RateLimits)
	}
	if got["a"] != "[{api }]" || got["b"] != "[{gpu a100} {api }]" {
		t.Fatalf("rate limits: %v", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ name, file, path, want string }{
		{"not yaml", "flow: [", "", "not valid YAML"},
		{"empty", "", "", "empty"},
		{"flows", "flows: {}\n", "flows", `"flows" is not allowed`},
		{"discovery", "flow: {steps: {a: {}}}\ndiscovery: x\n", "discovery", `"discovery" is not allowed`},
		{"other top key", "job: {}\n", "job", "unknown key"},
		{"no flow", "# nothing\n{}\n", "", `no top-level "flow"`},
		{"unknown flow key", "flow:\n  stepz: {}\n", "flow.stepz", "unknown key"},
		{"unknown step key", "flow:\n  steps:\n    a: {queue: q, neds: [b]}\n", "flow.steps.a.neds", `unknown key "neds"`},
		{"defaults take no needs", "flow:\n  defaults: {needs: [a]}\n  steps: {a: {queue: q}}\n", "flow.defaults.needs", "unknown key"},
		{"duplicate step", "flow:\n  steps:\n    a: {queue: q}\n    a: {queue: r}\n", "flow.steps.a", "given twice"},
		{"needs not a list", "flow:\n  steps:\n    a: {queue: q, needs: b}\n", "flow.steps.a.needs", "list of step names"},
		{"bad number", "flow:\n  steps:\n    a: {queue: q, priority: high}\n", "flow.steps.a.priority", "whole number"},
		{"rate limits not a list", "flow:\n  steps:\n    a: {queue: q, rate_limits: api}\n", "flow.steps.a.rate_limits", "list of limits"},
		{"rate limit key", "flow:\n  steps:\n    a: {queue: q, rate_limits: [{nam: api}]}\n", "flow.steps.a.rate_limits", `unknown key "nam"`},
		// The JSON API's types exactly: no number cut to a whole one, no YAML 1.1 booleans or
		// octals, no number or boolean taken for a string, nor a quoted one for a number.
		{"fraction", "flow:\n  steps:\n    a: {queue: q, priority: 1.5}\n", "flow.steps.a.priority", "must be a whole number, not 1.5"},
		{"exponent", "flow:\n  defaults: {max_attempts: 1e1}\n  steps: {a: {queue: q}}\n", "flow.defaults.max_attempts", "whole number"},
		{"octal", "flow:\n  steps:\n    a: {queue: q, max_attempts: 017}\n", "flow.steps.a.max_attempts", "not 017"},
		{"quoted number", "flow:\n  steps:\n    a: {queue: q, priority: \"3\"}\n", "flow.steps.a.priority", `not the string "3"`},
		{"quoted yes", "flow:\n  steps:\n    a: {queue: q, continue_on_failure: \"yes\"}\n", "flow.steps.a.continue_on_failure", `must be true or false, not the string "yes"`},
		{"on", "flow:\n  steps:\n    a: {queue: q, continue_on_failure: on}\n", "flow.steps.a.continue_on_failure", `not the string "on"`},
		{"quoted no", "flow:\n  steps:\n    a: {queue: q, continue_on_failure: \"no\"}\n", "flow.steps.a.continue_on_failure", `not the string "no"`},
		{"quoted true", "flow:\n  steps:\n    a: {queue: q, continue_on_failure: \"true\"}\n", "flow.steps.a.continue_on_failure", `not the string "true"`},
		{"True", "flow:\n  steps:\n    a: {queue: q, continue_on_failure: True}\n", "flow.steps.a.continue_on_failure", "not True"},
		{"number for a string", "flow:\n  steps:\n    a: {queue: 123}\n", "flow.steps.a.queue", "must be a string, not 123"},
		{"number for a label", "flow:\n  steps:\n    a: {queue: q, labels: {gpu: 1}}\n", "flow.steps.a.labels.gpu", "must be a string, not 1"},
		{"boolean for a need", "flow:\n  steps:\n    a: {queue: q, needs: [true]}\n", "flow.steps.a.needs", "must be a string, not true"},
		{"a list for a string", "flow:\n  steps:\n    a: {queue: [q]}\n", "flow.steps.a.queue", "must be a string, not a list"},
		{"a mapping for a number", "flow:\n  steps:\n    a: {queue: q, priority: {p: 1}}\n", "flow.steps.a.priority", "must be a whole number, not a mapping"},
		{"no steps", "flow:\n  name: x\n", "flow", `no "steps"`},
		{"lease ttl past its limit", "flow:\n  steps:\n    a: {queue: q, lease_ttl_seconds: 99999999999}\n", "flow.steps.a", "lease_ttl_seconds 99999999999 is outside"},
		{"two documents", "flow: {steps: {a: {}}}\n---\nflow: {}\n", "", "more than one YAML document"},
	} {
		_, err := flowfile.Parse([]byte(c.file))
		var fe *flowfile.Error
		if !errors.As(err, &fe) || fe.Path != c.path || !strings.Contains(fe.Message, c.want) {
			t.Errorf("%s: got %#v, want path %q and %q", c.name, err, c.path, c.want)
		}
	}
	// What the JSON API takes is taken: a quoted word that looks like another type is a string.
	f, err := flowfile.Parse([]byte("flow:\n  steps:\n    a: {queue: \"123\", type: \"true\", priority: -3, lease_ttl_seconds: 1.5, continue_on_failure: false}\n" +
		"    b: {queue: q, needs: [a], continue_on_failure: true, labels: {on: \"yes\"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := f.Steps[0], f.Steps[1]; a.Job.Queue != "123" || a.Job.Type != "true" || a.Job.Priority != -3 || a.Job.LeaseTTL != 1500*time.Millisecond ||
		a.ContinueOnFailure || !b.ContinueOnFailure || b.Job.Labels["on"] != "yes" {
		t.Fatalf("steps %+v", f.Steps)
	}
	_, err = flowfile.Parse([]byte("flow:\n  steps:\n    a: {queue: q, neds: [b]}\n"))
	if fe := err.(*flowfile.Error); fe.Line != 3 || !strings.Contains(fe.Error(), "line 3") {
		t.Errorf("line of an unknown key: %v", err)
	}
}

func TestManyStepsAreRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("flow:\n  steps:\n")
	for i := range 101 {
		b.WriteString("    s" + strings.Repeat("x", i) + ": {queue: q}\n")
	}
	_, err := flowfile.Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "at most 100 steps") {
		t.Fatalf("101 steps: %v", err)
	}
}

// A step's payload reads as the same payload sent as JSON would: a number keeps the text it was
// written with (a big integer stays exact; one past a double's range is refused, as a JSON
// body's is, rather than turned into a string), a date stays its text, aliases and merge keys
// are followed, and what JSON cannot hold is refused with the payload's path.
func TestPayloadReadsAsJSON(t *testing.T) {
	step := func(payload string) string {
		return "flow:\n  steps:\n    a:\n      queue: q\n      payload: " + payload + "\n"
	}
	for _, c := range []struct{ payload, want string }{
		{`{n: 123456789012345678901234567890}`, `{"n":123456789012345678901234567890}`},
		{`{n: 1.50, m: -0, e: 2.5e-3}`, `{"n":1.50,"m":-0,"e":2.5e-3}`},
		{`{hex: 0x1F, under: 1_000, dot: .5}`, `{"hex":31,"under":1000,"dot":0.5}`},
		{`{day: 2001-01-01, s: "1e999", b: true, z: null, l: [1, "x"]}`, `{"day":"2001-01-01","s":"1e999","b":true,"z":null,"l":[1,"x"]}`},
		{`{base: &b {x: 1, y: 2}, more: {<<: *b, y: 3}}`, `{"base":{"x":1,"y":2},"more":{"y":3,"x":1}}`},
		{`[b, a]`, `["b","a"]`},
	} {
		f, err := flowfile.Parse([]byte(step(c.payload)))
		if err != nil {
			t.Errorf("%s: %v", c.payload, err)
			continue
		}
		if got := string(f.Steps[0].Job.Payload); got != c.want {
			t.Errorf("%s: payload %s, want %s", c.payload, got, c.want)
		}
	}
	for _, c := range []struct{ payload, want string }{
		{`{n: 1e999}`, "beyond the range of a double"},
		{`{n: -1e400}`, "beyond the range of a double"},
		{`{n: .inf}`, "JSON has no number"},
		{`{n: .nan}`, "JSON has no number"},
		{`{1: x}`, "keys are strings"},
	} {
		_, err := flowfile.Parse([]byte(step(c.payload)))
		var fe *flowfile.Error
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Path, "flow.steps.a.payload") || !strings.Contains(fe.Message, c.want) {
			t.Errorf("%s: got %v, want an error at the payload saying %q", c.payload, err, c.want)
		}
	}
}

// A payload of aliases of aliases (a "billion laughs": 9^7 strings from a few lines) is refused
// once its expansion passes the largest payload a submit takes, in about the time that takes,
// rather than built in memory.
func TestAPayloadOfAliasesIsBounded(t *testing.T) {
	file := "flow:\n  steps:\n    a:\n      queue: q\n      payload:\n        a0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n"
	for i := 1; i <= 6; i++ { // 9^7 strings, 29 MB of JSON: refused at 1 MiB
		prev := fmt.Sprintf("*a%d", i-1)
		file += fmt.Sprintf("        a%d: &a%d [%s]\n", i, i, strings.Repeat(prev+", ", 8)+prev)
	}
	_, err := flowfile.Parse([]byte(file))
	var fe *flowfile.Error
	if !errors.As(err, &fe) || !strings.HasPrefix(fe.Path, "flow.steps.a.payload") || !strings.Contains(fe.Message, "aliases expanded") {
		t.Fatalf("a payload of 9^7 strings: %v", err)
	}
}
