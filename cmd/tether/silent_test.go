package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/wire"
)

// A server that takes connections and never answers (a paused process, a frozen VM, a hung
// disk: the kernel still completes the handshake) first in every client's --server: the CLI's
// requests, a submit without an idempotency key among them, go to the server that answers,
// each run costing less than one Patience (10 s) where it cost one each and the submit failed
// with it; a worker registers and runs the job, where it waited on the silent server for good.
func TestClientsGoPastASilentFirstServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	// A listener that never accepts: connections wait in its backlog, as a stopped process's do.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	s := startServer(t, t.TempDir())
	list := "http://" + silent.Addr().String() + "," + s.url
	const patience = 10 * time.Second // the client's Patience, which the silent server cost each request
	run := func(args ...string) string {
		t.Helper()
		began := time.Now()
		out, errOut, code := tether(t, nil, append(args, "--server", list)...)
		took := time.Since(began)
		if code != 0 || took >= patience {
			t.Fatalf("tether %s: exit %d after %s\n%s", strings.Join(args, " "), code, took.Round(time.Millisecond), errOut)
		}
		t.Logf("tether %s took %s", strings.Join(args[:2], " "), took.Round(time.Millisecond))
		return out
	}
	var j wire.Job
	if err := json.Unmarshal([]byte(run("job", "submit", "--queue", "q", "--type", "t", "--json")), &j); err != nil || j.ID == "" {
		t.Fatalf("the submit printed no job: %v", err)
	}
	run("job", "get", j.ID, "--json")
	startTether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "worker", "--server", list, "--queue", "q", "--log-format", "json",
		"--", "sh", "-c", "cat")
	if done := awaitJob(t, client.New(s.url, "", nil), j.ID); done.Status != "succeeded" {
		t.Fatalf("the job ended %s", done.Status)
	}
	if out := run("job", "watch", j.ID); !strings.Contains(out, "succeeded") {
		t.Fatalf("the watch ended with %q", out)
	}
}
