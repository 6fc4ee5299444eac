package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
)

// Every replay subcommand runs on a stopped server's data dir; a wrong receipt and a dir a
// server holds are refused with a plain message.
func TestReplayCommands(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Open(broker.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	res, receipt, err := b.Submit(context.Background(), "default", "", actors.JobSpec{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	export := t.TempDir() + "/export.jsonl"
	for _, args := range [][]string{
		{"verify", "--data", dir},
		{"verify", "--data", dir, "--json"},
		{"history", "--data", dir, res[0].Job.ID},
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
