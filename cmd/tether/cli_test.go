package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/transporttest"
	"github.com/tetherhq/tether/transport/wire"
)

// What a user mistypes is refused, once, with the reason; nothing is taken silently.
func TestCommandLineMistakes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	s := startServer(t, dir)
	c := client.New(s.url, "", nil)
	if _, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	srv := "--server=" + strings.TrimPrefix(s.url, "http://") // host:port, no scheme: http:// is meant
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"job", "ls", srv, "--limit", "0"}, "--limit 0: want 1..1000"},
		{[]string{"job", "ls", srv, "--limit", "-1"}, "--limit -1: want 1..1000"},
		{[]string{"worker", srv, "--transport", "carrier-pigeon", "--", "cat"}, `--transport "carrier-pigeon"`},
		{[]string{"worker", srv, "--timeout", "-5s", "--", "cat"}, "--timeout"},
		{[]string{"worker", srv, "--capacity", "0", "--", "cat"}, "--capacity 0"},
		{[]string{"worker", srv}, "no command given"},
		{[]string{"admin", "enroll-token", srv, "--tenant", "default", "--uses", "0"}, "--uses 0"},
		{[]string{"admin", "quota", srv, "--max-active", "3"}, "--tenant is required"},
		{[]string{"admin", "quota", srv, "--tenant", "default"}, "nothing to change"},
		{[]string{"sim", "--steps", "-1"}, "--steps"},
		{[]string{"job", "ls", "--server", "ftp://example.com"}, "is not a server URL"},
		{[]string{"job", "ls", "--server", "htp:/127.0.0.1:8080"}, "is not a server URL"},
		{[]string{"job", "ls", "--server", "http://a:8080,htp:/b:8080"}, "is not a server URL"},
		{[]string{"bench", srv, "--workers", "0"}, "--producers, --workers and --capacity"},
		{[]string{"bench", srv, "--burn-down", "10", "--capacity", "0"}, "--producers, --workers and --capacity"},
		{[]string{"bench", srv, "--burn-down", "10", "--rate", "5"}, "--burn-down does not go with"},
		{[]string{"bench", srv, "--river-peer", "postgres://nowhere/db"}, "--river-peer runs a burn-down"},
		{[]string{"bench", srv, "--capacity", "2"}, "--capacity goes with --burn-down"},
		{[]string{"bench", srv, "--burn-down", "9000000000000000000"}, "at most 100000000"},
		{[]string{"bench", srv, "--jobs", "100000001"}, "at most 100000000"},
		{[]string{"bench", srv, "--burn-down", "0"}, "--burn-down 0 drains nothing"},
		{[]string{"bench", srv, "--burn-down", "10", "--jobs", "50"}, "does not go with --jobs"},
		{[]string{"bench", srv, "--rate", "1e12", "--duration", "1h"}, "at most 100000000 jobs"},
		{[]string{"bench", srv, "--rate", "1e6", "--duration", "1000h"}, "at most 100000000 jobs"},
		{[]string{"bench", srv, "--rate", "NaN"}, "--rate is a number"},
		{[]string{"bench", srv, "--rate", "Inf", "--duration", "0s"}, "--rate is a number"},
		{[]string{"bench", srv, "--rate", "200", "--duration", "1s", "--jobs", "300"}, "does not go with --jobs"},
		{[]string{"bench", srv, "--fill", "0", "--jobs", "200"}, "--fill 0 fills nothing"},
		{[]string{"bench", srv, "--nats-peer", "nats://127.0.0.1:1", "--rate", "5"}, "--nats-peer runs saturated"},
		{[]string{"bench", srv, "--nats-peer", "nats://127.0.0.1:1", "--fill", "5"}, "--nats-peer runs saturated"},
		{[]string{"bench", srv, "--setup-timeout", "-1s"}, "not negative"},
	} {
		stdout, stderr, code := tether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "usage") {
			t.Errorf("tether %v: exit %d, stderr %q, want %q and the usage (stdout %q)", tc.args, code, stderr, tc.want, stdout)
		}
	}
	// A mistake only the server can see is a failure, exit 1, without the usage.
	if _, stderr, code := tether(t, nil, "job", "ls", srv, "--cursor", "garbage"); code != 1 || !strings.Contains(stderr, `cursor "garbage" is not a next_cursor`) {
		t.Errorf("--cursor garbage: exit %d, stderr %q", code, stderr)
	}
	// The server now is a stopped server's dir for replay.
	stop(t, s)
	out := filepath.Join(t.TempDir(), "part.jsonl")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "5", "--to", "3"}, "--to comes before --from"},
		{[]string{"--from", "1000"}, "past the log's head"},
		{[]string{"--to", "1000"}, "past the log's head"},
	} {
		args := append([]string{"replay", "export", "--data", dir, "--out", out}, tc.args...)
		if _, stderr, code := tether(t, nil, args...); code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("tether %v: exit %d, stderr %q, want %q", args, code, stderr, tc.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("tether %v made the file anyway", args)
		}
	}
}

// A wrong flag exits 2 and says the mistake once, then the usage, on stderr; --help is no
// error and prints to stdout, as with the shell's own tools. Every command's --help works, which
// also proves no flag reads the jobs' own TETHER_JOB_* variables (parseFlags refuses such a flag).
func TestFlagErrorsAndHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	stdout, stderr, code := tether(t, nil, "job", "ls", "--bogus")
	if code != 2 || strings.Count(stderr, "flag provided but not defined: -bogus") != 1 || !strings.Contains(stderr, "usage of tether job ls") || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	for _, args := range [][]string{
		{}, {"bogus"}, {"job"}, {"job", "bogus"}, {"admin"}, {"replay"}, {"server", "--addr"}, {"sim", "--seed", "x"},
		{"job", "get"}, {"worker", "--bogus", "--", "cat"}, {"job", "delete"}, {"job", "purge"}, {"job", "purge", "--older-than", "-1h"},
		// A stray word is refused, not taken to end the flags, dropping those after it.
		{"sim", "--steps", "10", "stray", "--seed", "7"}, {"bench", "stray", "--jobs", "1"}, {"server", "--data", "d", "stray", "--auth", "token"},
		{"worker", "--queue", "q", "stray", "--", "cat"}, {"worker", "--queue", "q", "cat"},
		{"worker", "--queue", "", "--", "cat"}, {"worker", "register", "--queue", " , "}, {"worker", "--queue", "q", "--", "/nonexistent/cmd"}, {"worker", "--log-level", "loud", "--", "cat"},
	} {
		stdout, stderr, code := tether(t, nil, args...)
		if code != 2 || !strings.Contains(stderr, "usage") || stdout != "" {
			t.Errorf("tether %v: exit %d, stdout %q, stderr:\n%s", args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{
		{}, {"job"}, {"admin"}, {"replay"},
		{"server"}, {"worker"}, {"worker", "register"}, {"worker", "keygen"}, {"job", "submit"}, {"job", "get"}, {"job", "ls"},
		{"job", "cancel"}, {"job", "retry"}, {"job", "watch"}, {"job", "delete"}, {"job", "purge"}, {"admin", "apikey"}, {"admin", "enroll-token"}, {"admin", "quota"},
		{"bench"}, {"replay", "verify"}, {"replay", "history"}, {"replay", "state"}, {"replay", "export"}, {"replay", "receipt"}, {"sim"},
	} {
		for _, help := range []string{"--help", "-h"} {
			stdout, stderr, code := tether(t, nil, append(args, help)...)
			if code != 0 || !strings.Contains(stdout, "usage") || stderr != "" {
				t.Errorf("tether %v %s: exit %d, stdout %q, stderr %q", args, help, code, stdout, stderr)
			}
		}
	}
}

// `admin quota` changes only the limits it is given.
func TestAdminQuotaIsPartial(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	for _, args := range [][]string{{"--max-active", "10"}, {"--max-running", "2"}} {
		if _, stderr, code := tether(t, nil, append([]string{"admin", "quota", "--server", s.url, "--tenant", "default"}, args...)...); code != 0 {
			t.Fatalf("admin quota %v: exit %d\n%s", args, code, stderr)
		}
	}
	q, err := client.New(s.url, "", nil).Quota(context.Background())
	if err != nil || q.MaxActive != 10 || q.MaxRunning != 2 {
		t.Fatalf("quota %+v (%v), want max_active 10 and max_running 2", q, err)
	}
}

// A finished job is deleted from the command line, and answers JOB_EXPIRED after; a purge of
// dead letters reports how many went.
func TestJobDeleteAndPurge(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir(), "--retain", "1h")
	run := func(args ...string) (string, string, int) {
		return tether(t, nil, append(append([]string{"job"}, args...), "--server", s.url)...)
	}
	id, stderr, code := run("submit", "--queue", "q", "--type", "t", "--result-ttl", "30s", "--quiet")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run("delete", id); code != 1 || !strings.Contains(stderr, "JOB_NOT_FINISHED") {
		t.Fatalf("delete of a queued job: exit %d\n%s", code, stderr)
	}
	run("cancel", id)
	if out, _, _ := run("get", id); !strings.Contains(out, "expires") {
		t.Fatalf("get of a cancelled job does not say when it expires:\n%s", out)
	}
	if out, stderr, code := run("delete", id); code != 0 || !strings.Contains(out, id+" deleted") {
		t.Fatalf("delete: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code := run("get", id); code != 1 || !strings.Contains(stderr, "JOB_EXPIRED (410)") {
		t.Fatalf("get of a deleted job: exit %d\n%s", code, stderr)
	}
	if out, stderr, code := run("purge", "--older-than", "0s", "--queue", "q"); code != 0 || out != "0 dead letters purged\n" {
		t.Fatalf("purge: exit %d\n%q%s", code, out, stderr)
	}
}

// `queue pause` and `queue resume` act on the queue and `queue ls` shows it; a job submitted to
// the paused queue waits in it.
func TestQueuePauseAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	run := func(args ...string) (string, string, int) {
		return tether(t, nil, append(append([]string{"queue"}, args...), "--server", s.url)...)
	}
	if out, stderr, code := run("pause", "renders"); code != 0 || !strings.Contains(out, "queue renders paused since") {
		t.Fatalf("pause: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code := tether(t, nil, "job", "submit", "--server", s.url, "--queue", "renders", "--type", "t", "--quiet"); code != 0 {
		t.Fatalf("submit to a paused queue: exit %d\n%s", code, stderr)
	}
	out, _, _ := run("ls")
	mustContain(t, "queue ls", out, "renders", "paused since")
	if out, stderr, code := run("resume", "renders"); code != 0 || out != "queue renders assigns jobs\n" {
		t.Fatalf("resume: exit %d\n%q%s", code, out, stderr)
	}
	if out, _, _ := run("ls"); !strings.Contains(out, "active") {
		t.Fatalf("queue ls after resume:\n%s", out)
	}
	if _, stderr, code := run("pause", "bad name"); code != 1 || !strings.Contains(stderr, "INVALID_ARGUMENT") {
		t.Fatalf("a bad queue name: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run("pause"); code != 2 || !strings.Contains(stderr, "usage") {
		t.Fatalf("no queue named: exit %d\n%s", code, stderr)
	}
}

// `job cancel-all` pages through its filter to the end; with no filter it refuses unless told
// --all; `job retry-all` with nothing dead re-drives nothing.
func TestJobCancelAll(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	run := func(args ...string) (string, string, int) {
		return tether(t, nil, append(append([]string{"job"}, args...), "--server", s.url)...)
	}
	for range 3 {
		if _, stderr, code := run("submit", "--queue", "q", "--type", "t", "--label", "run=9", "--quiet"); code != 0 {
			t.Fatalf("submit: exit %d\n%s", code, stderr)
		}
	}
	run("submit", "--queue", "q", "--type", "t", "--quiet")
	if out, stderr, code := run("cancel-all", "--label", "run=9"); code != 0 || !strings.HasPrefix(out, "3 jobs cancelled, 0 leased jobs asked to stop\nreceipt seq=") {
		t.Fatalf("cancel-all: exit %d\n%q%s", code, out, stderr)
	}
	if _, stderr, code := run("cancel-all"); code != 2 || !strings.Contains(stderr, "--all") {
		t.Fatalf("cancel-all with no filter: exit %d\n%s", code, stderr)
	}
	if out, stderr, code := run("cancel-all", "--all"); code != 0 || !strings.HasPrefix(out, "1 jobs cancelled") { // the server, too, needs all: true
		t.Fatalf("cancel-all --all: exit %d\n%q%s", code, out, stderr)
	}
	if out, stderr, code := run("retry-all", "--queue", "q"); code != 0 || out != "0 dead letters re-driven\n" {
		t.Fatalf("retry-all: exit %d\n%q%s", code, out, stderr)
	}
	if out, stderr, code := run("retry-all", "--all"); code != 0 || out != "0 dead letters re-driven\n" {
		t.Fatalf("retry-all --all: exit %d\n%q%s", code, out, stderr)
	}
	if _, stderr, code := run("cancel-all", "--created-before", "yesterday"); code != 2 || !strings.Contains(stderr, "created-before") {
		t.Fatalf("a bad time: exit %d\n%s", code, stderr)
	}
}

// `flow submit|get|ls|cancel` drive a flow; a bad file fails with the server's code and place,
// a missing file or argument with usage.
func TestFlowCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	dir := t.TempDir()
	run := func(args ...string) (string, string, int) {
		return tether(t, nil, append(append([]string{"flow"}, args...), "--server", s.url)...)
	}
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(good, []byte("flow:\n  defaults: {queue: nobody-serves}\n  steps: {a: {}, b: {needs: [a]}}\n"), 0o644)
	_ = os.WriteFile(bad, []byte("flow:\n  steps:\n    a: {queue: q, neds: [b]}\n"), 0o644)
	out, stderr, code := run("submit", good, "--name", "n1", "--json")
	var f struct{ ID, Status string }
	if code != 0 || json.Unmarshal([]byte(out), &f) != nil || f.Status != "running" {
		t.Fatalf("submit: exit %d\n%s%s", code, out, stderr)
	}
	out, _, _ = run("get", f.ID)
	mustContain(t, "flow get", out, "n1", "running", "a ", "queued", "b ", "waiting")
	out, _, _ = run("ls")
	mustContain(t, "flow ls", out, f.ID, "0/2 succeeded")
	if out, stderr, code := run("cancel", f.ID); code != 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code := run("cancel", f.ID); code != 1 || !strings.Contains(stderr, "FLOW_ENDED") {
		t.Fatalf("cancel again: exit %d\n%s", code, stderr)
	}
	// Watching an ended flow from its last event ends at once, as the flow ended; it used to
	// wait until something else in the server changed, 15 s or more here.
	evs, err := client.New(s.url, "", nil).FlowEvents(context.Background(), f.ID, 0)
	if err != nil || !evs.Done {
		t.Fatalf("the cancelled flow's events: %+v %v", evs, err)
	}
	began := time.Now()
	out, stderr, code = run("watch", f.ID, "--after", strconv.Itoa(len(evs.Events)))
	if took := time.Since(began); code != 1 || out != "done: cancelled\n" || !strings.Contains(stderr, "the flow ended cancelled") || took > 10*time.Second {
		t.Fatalf("watch after the last event: exit %d after %s\n%s%s", code, took, out, stderr)
	}
	if _, stderr, code := run("submit", bad, "--name", "n2"); code != 1 || !strings.Contains(stderr, "INVALID_FLOW") || !strings.Contains(stderr, "line 3") {
		t.Fatalf("a bad file: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run("submit", filepath.Join(dir, "missing.yaml")); code != 1 || !strings.Contains(stderr, "no such file") {
		t.Fatalf("a missing file: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run("submit"); code != 2 || !strings.Contains(stderr, "usage") {
		t.Fatalf("no file: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run("get", "01JNOSUCHFLOW"); code != 1 || !strings.Contains(stderr, "FLOW_NOT_FOUND") {
		t.Fatalf("an unknown flow: exit %d\n%s", code, stderr)
	}
}

func TestScheduleCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	run := func(args ...string) (string, string, int) {
		return tether(t, nil, append(append([]string{"schedule"}, args...), "--server", s.url)...)
	}
	create := []string{"create", "--name", "nightly", "--cron", "30 2 * * *", "--timezone", "Europe/Paris",
		"--queue", "reports", "--type", "daily", "--payload", `{"scope":"all"}`, "--label", "team=ml"}
	out, stderr, code := run(append(create, "--json")...)
	var sc struct{ ID, Status, Timezone string }
	if code != 0 || json.Unmarshal([]byte(out), &sc) != nil || sc.Status != "active" || sc.Timezone != "Europe/Paris" {
		t.Fatalf("create: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = run(create...)
	mustContain(t, "create again", out, sc.ID, "it existed with this definition")
	if code != 0 {
		t.Fatalf("create again: exit %d", code)
	}
	out, _, _ = run("get", sc.ID)
	mustContain(t, "schedule get", out, "nightly", "30 2 * * *  (Europe/Paris)", "queue reports, type daily", "overlap skip, catch_up one", "next")
	out, _, _ = run("ls")
	mustContain(t, "schedule ls", out, sc.ID, "nightly", "active")
	out, _, _ = run("pause", sc.ID)
	mustContain(t, "schedule pause", out, "paused", "receipt")
	out, _, _ = run("resume", sc.ID)
	mustContain(t, "schedule resume", out, "active")
	// Its unique name does as well as its id.
	out, stderr, code = run("get", "nightly")
	mustContain(t, "schedule get by name", out, sc.ID, "nightly", "active")
	if code != 0 {
		t.Fatalf("get by name: exit %d\n%s", code, stderr)
	}
	out, _, _ = run("pause", "nightly")
	mustContain(t, "schedule pause by name", out, sc.ID, "paused")
	out, _, _ = run("resume", "nightly")
	mustContain(t, "schedule resume by name", out, sc.ID, "active")
	if _, stderr, code := run("get", "nightlyy"); code != 1 || !strings.Contains(stderr, "SCHEDULE_NOT_FOUND") {
		t.Fatalf("get a name that is not there: exit %d\n%s", code, stderr)
	}
	if out, stderr, code := run("delete", "nightly"); code != 0 || !strings.Contains(out, "schedule "+sc.ID+" deleted") {
		t.Fatalf("delete by name: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code := run("get", sc.ID); code != 1 || !strings.Contains(stderr, "SCHEDULE_NOT_FOUND") {
		t.Fatalf("get after delete: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run("create", "--name", "typo", "--cron", "30 2 * *", "--queue", "q"); code != 1 || !strings.Contains(stderr, "INVALID_SCHEDULE") {
		t.Fatalf("a cron with four fields: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run("create", "--name", "typo", "--cron", "@daily", "--timezone", "Europe/Pari"); code != 1 || !strings.Contains(stderr, "timezone") {
		t.Fatalf("a misspelt time zone: exit %d\n%s", code, stderr)
	}
	if _, stderr, code := run("create", "--cron", "@daily"); code != 2 || !strings.Contains(stderr, "--name and --cron are required") {
		t.Fatalf("no name: exit %d\n%s", code, stderr)
	}
}

// The CLI tries a request that is safe to repeat again while no server takes it, for
// --retry-for: a submit under an idempotency key, started before the server, is acknowledged
// once the server is up; one without a key is not repeated, and fails at once.
func TestCLIRetriesAcrossARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	addr := freeAddr(t)
	srv := "--server=http://" + addr
	if _, stderr, code := tether(t, nil, "job", "submit", srv, "--queue", "q", "--type", "t"); code != 1 || !strings.Contains(stderr, "connection refused") {
		t.Fatalf("a submit without a key to no server: exit %d, %s", code, stderr)
	}
	submit := startTether(t, nil, "job", "submit", srv, "--queue", "q", "--type", "t", "--idempotency-key", "k1", "--retry-for", "60s", "--json")
	server := startTether(t, nil, "server", "--data", t.TempDir(), "--addr", addr)
	defer server.signal(t, syscall.SIGTERM)
	if code := submit.wait(time.Minute); code != 0 {
		t.Fatalf("a submit under a key across the server's start: exit %d\n%s", code, submit.output())
	}
	var j wire.Job
	if err := json.Unmarshal([]byte(submit.output()[strings.Index(submit.output(), "{"):]), &j); err != nil || j.ID == "" || j.Status != "queued" {
		t.Fatalf("the submit printed %q: %v", submit.output(), err)
	}
}

// Under --json an error is JSON too: one object on stderr, the server's error shape, with the
// server's code when it refused and one of the command line's own (docs/errors.md) when the
// command line found the mistake or reached no server; the exit status is as without --json.
func TestJSONErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	c := client.New(s.url, "", nil)
	j, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "nobody-serves", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	certs := t.TempDir()
	transporttest.WriteCert(t, filepath.Join(certs, "cert.pem"), filepath.Join(certs, "key.pem"), time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	untrusted := startServer(t, t.TempDir(), "--tls-cert", filepath.Join(certs, "cert.pem"), "--tls-key", filepath.Join(certs, "key.pem"))
	srv, nowhere := "--server="+s.url, "--server="+freeAddr(t)
	for _, tc := range []struct {
		env  []string
		args []string
		code int
		want string
	}{
		{nil, []string{"job", "get", "01JNOSUCHJOB", srv, "--json"}, 1, "JOB_NOT_FOUND"},
		{nil, []string{"flow", "get", "01JNOSUCHFLOW", "--json", srv}, 1, "FLOW_NOT_FOUND"},
		{nil, []string{"schedule", "get", "01JNOSUCHSCHEDULE", srv, "--json"}, 1, "SCHEDULE_NOT_FOUND"},
		{nil, []string{"admin", "apikey", "revoke", "nosuch", srv, "--json"}, 1, "API_KEY_NOT_FOUND"},
		{nil, []string{"job", "ls", srv, "--cursor", "garbage", "--json"}, 1, "INVALID_ARGUMENT"},
		{[]string{"TETHER_JSON=true"}, []string{"queue", "pause", "a queue?", srv}, 1, "INVALID_ARGUMENT"},
		{nil, []string{"job", "watch", j.ID, srv, "--json"}, 1, "CLI_NOT_SUCCEEDED"},
		{nil, []string{"job", "ls", "--bogus", srv, "--json"}, 2, "CLI_USAGE"},
		{nil, []string{"job", "ls", "--json", "--limit", "0", srv}, 2, "CLI_USAGE"},
		{[]string{"TETHER_JSON=1"}, []string{"admin", "quota", srv, "--bogus"}, 2, "CLI_USAGE"},
		{nil, []string{"job", "sbumit", "--json"}, 2, "CLI_USAGE"},
		{nil, []string{"jbo", "ls", "--json"}, 2, "CLI_USAGE"},
		{nil, []string{"job", "get", "01JNOSUCHJOB", nowhere, "--retry-for", "0", "--json"}, 1, "CLI_UNREACHABLE"},
		{nil, []string{"bench", nowhere, "--json"}, 1, "CLI_UNREACHABLE"},
		{nil, []string{"job", "get", "01JNOSUCHJOB", "--server", untrusted.url, "--json"}, 1, "CLI_CERTIFICATE_REFUSED"},
		{nil, []string{"replay", "verify", "--data", filepath.Join(t.TempDir(), "none"), "--json"}, 1, "CLI_ERROR"},
	} {
		stdout, stderr, code := tether(t, tc.env, tc.args...)
		var e struct {
			Error struct {
				Code, Message string
				Details       map[string]any
				RequestID     string `json:"request_id"`
			}
		}
		dec := json.NewDecoder(strings.NewReader(stderr))
		dec.DisallowUnknownFields()
		if code != tc.code || dec.Decode(&e) != nil || dec.More() || e.Error.Code != tc.want || e.Error.Message == "" || e.Error.Details == nil {
			t.Errorf("tether %v: exit %d, stderr %q, want exit %d and one error object with code %s (stdout %q)", tc.args, code, stderr, tc.code, tc.want, stdout)
		}
	}
}
