package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/audit"
	"github.com/tetherhq/tether/transport/flowfile"
)

// oneJobDir is a stopped server's data dir that holds one submitted job: its id, and the
// submit's receipt.
func oneJobDir(t *testing.T) (dir, jobID string, receipt actors.Receipt) {
	dir = t.TempDir()
	b, err := broker.Open(broker.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	res, r, err := b.Submit(context.Background(), "default", "", actors.JobSpec{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, res[0].Job.ID, r
}

// Every replay subcommand runs on a stopped server's data dir; a wrong receipt and a dir a
// server holds are refused with a plain message.
func TestReplayCommands(t *testing.T) {
	dir, jobID, receipt := oneJobDir(t)
	export := t.TempDir() + "/export.jsonl"
	for _, args := range [][]string{
		{"verify", "--data", dir},
		{"verify", "--data", dir, "--json"},
		{"history", "--data", dir, jobID},
		{"state", "--data", dir, "--at", "1"},
		{"state", "--data", dir, "--at", "2030-01-01T00:00:00Z", "--json"},
		{"export", "--data", dir, "--out", export},
		{"verify", "--export", export},
		{"receipt", "--data", dir, "--seq", strconv.FormatUint(receipt.Seq, 10), "--hash", receipt.Hash},
	} {
		if err := runReplay(args); err != nil {
			t.Errorf("replay %v: %v", args, err)
		}
	}
	wrong := strings.Repeat("0", 64)
	if err := runReplay([]string{"receipt", "--data", dir, "--seq", "1", "--hash", wrong}); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("a wrong receipt: %v", err)
	}
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := runReplay([]string{"verify", "--data", dir}); err == nil || !strings.Contains(err.Error(), "in use by a running server") {
		t.Errorf("a dir in use: %v", err)
	}
}

// `replay state --at` shows the flows and schedules as they stood, as it shows jobs.
func TestReplayStateShowsFlowsAndSchedules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	b, err := broker.Open(broker.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	schedID, _, made, err := b.CreateSchedule(ctx, actors.CreateSchedule{Tenant: "default", Spec: actors.ScheduleSpec{
		Name: "nightly", Cron: "30 2 * * *", Timezone: "Europe/Paris", Job: actors.JobSpec{Queue: "q", Type: "report"}}})
	if err != nil {
		t.Fatal(err)
	}
	file, err := flowfile.Parse([]byte("flow:\n  defaults: {queue: nobody-serves}\n  steps: {a: {}, b: {needs: [a]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	flowID, _, submitted, err := b.SubmitFlow(ctx, actors.SubmitFlow{Tenant: "default", Name: "n1", Steps: file.Steps})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CancelFlow(ctx, "default", "", flowID); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	state := func(seq uint64) string {
		out, stderr, code := tether(t, nil, "replay", "state", "--data", dir, "--at", strconv.FormatUint(seq, 10))
		if code != 0 {
			t.Fatalf("replay state --at %d: exit %d\n%s", seq, code, stderr)
		}
		return out
	}
	before := state(made.Seq - 1)
	mustContain(t, "the state before the schedule", before, "flows     running 0, succeeded 0, failed 0, cancelled 0\n", "schedules 0\n")
	running := state(submitted.Seq)
	mustContain(t, "the state as the flow started", running, "flows     running 1, succeeded 0, failed 0, cancelled 0\n",
		"  flow "+flowID+"  tenant default  n1  running  steps queued 1, waiting 1\n",
		"schedules 1\n  "+schedID+"  tenant default  nightly  30 2 * * * (Europe/Paris)  active  fired 0  skipped -  last tick -\n")
	out, stderr, code := tether(t, nil, "replay", "state", "--data", dir, "--at", "2100-01-01T00:00:00Z", "--json")
	var st audit.State
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("replay state --json: exit %d\n%s%s", code, out, stderr)
	}
	// (The cancelled flow may still be live: its step's job's cancel can be after the last record.)
	if st.Flows[projections.FlowCancelled] != 1 || st.Flows[projections.FlowRunning] != 0 ||
		len(st.Schedules) != 1 || st.Schedules[0].ID != schedID || st.Schedules[0].Paused || st.Schedules[0].Skipped == nil {
		t.Fatalf("the state at the end: %s", out)
	}
}

// A replay command line that is wrong is a usage error (exit 2; CLI_USAGE under --json), found
// before the log is read; `state --json` leaves out what never was and lists nothing as [];
// `export --json` says what it wrote.
func TestReplayMistakesAndJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir, _, _ := oneJobDir(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"verify"}, "--data is required"},
		{[]string{"state", "--data", dir, "--at", "garbage"}, `--at "garbage" is neither a seq nor an RFC 3339 time`},
		{[]string{"state", "--data", dir}, "--at is required"},
		{[]string{"receipt", "--data", dir, "--seq", "1", "--hash", "deadbeef"}, `--hash "deadbeef": want the receipt's hash, 64 hex digits`},
		{[]string{"history", "--data", dir, "--nats-creds", "x.creds", "job"}, "the --nats-* flags go with --log nats://..."},
	} {
		args := append([]string{"replay"}, tc.args...)
		if _, stderr, code := tether(t, nil, args...); code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "usage") {
			t.Errorf("tether %v: exit %d, stderr %q, want %q", args, code, stderr, tc.want)
		}
		args = append(args, "--json")
		if _, stderr, code := tether(t, nil, args...); code != 2 || !strings.Contains(stderr, `"CLI_USAGE"`) {
			t.Errorf("tether %v: exit %d, stderr %q, want CLI_USAGE", args, code, stderr)
		}
	}
	out, stderr, code := tether(t, nil, "replay", "state", "--data", dir, "--at", "1", "--json")
	if code != 0 || strings.Contains(out, "paused_since") || !strings.Contains(out, `"leases": []`) || strings.Contains(out, "null") {
		t.Errorf("replay state --json: exit %d, stdout %s, stderr %s", code, out, stderr)
	}
	file := t.TempDir() + "/export.jsonl"
	out, stderr, code = tether(t, nil, "replay", "export", "--data", dir, "--out", file, "--json")
	var written struct {
		File              string
		Records, From, To uint64
	}
	if code != 0 || json.Unmarshal([]byte(out), &written) != nil || written.File != file || written.Records != 1 || written.From != 1 || written.To != 1 {
		t.Errorf("replay export --json: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// `replay export --out /dev/stdout` writes the records there and exits 0 (a device takes no
// sync); an export that fails part way leaves no file behind, and an export over an existing
// file leaves it as it was.
func TestReplayExportToDevicesAndFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir, _, _ := oneJobDir(t)
	out, stderr, code := tether(t, nil, "replay", "export", "--data", dir, "--out", "/dev/stdout")
	if code != 0 || !strings.Contains(out, `"type":"job.submitted"`) {
		t.Errorf("replay export --out /dev/stdout: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	archived, segs, _, _ := archivedDataDir(t)
	first := filepath.Join(archived, "archive", segs[0])
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b[40] ^= 1 // inside the first frame: the export fails at its first record
	if err := os.WriteFile(first, b, 0o644); err != nil {
		t.Fatal(err)
	}
	files := t.TempDir()
	fresh := filepath.Join(files, "fresh.jsonl")
	if _, stderr, code := tether(t, nil, "replay", "export", "--data", archived, "--out", fresh); code == 0 || !strings.Contains(stderr, "checksum") {
		t.Errorf("an export through a damaged segment: exit %d, stderr %q", code, stderr)
	}
	kept := filepath.Join(files, "kept.jsonl")
	if err := os.WriteFile(kept, []byte("the export before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, code := tether(t, nil, "replay", "export", "--data", archived, "--out", kept); code == 0 {
		t.Error("an export through a damaged segment over a file: exit 0")
	}
	entries, err := os.ReadDir(files)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "kept.jsonl" {
		t.Errorf("after the failed exports the directory holds %v, want kept.jsonl alone", entries)
	}
	if b, err := os.ReadFile(kept); err != nil || string(b) != "the export before\n" {
		t.Errorf("the file an export failed to replace: %q, %v", b, err)
	}
}
