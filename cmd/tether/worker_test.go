package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/transporttest"
	"github.com/tetherhq/tether/transport/wire"
)

// `tether worker` as users run it: real processes, real signals.

// online waits until the server shows n workers online, and returns them.
func online(t *testing.T, c *client.Client, n int) []wire.Worker {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, err := c.Workers(context.Background())
		if err != nil { // the server may be on its way up
			ws = &wire.Workers{}
		}
		up := 0
		for _, w := range ws.Workers {
			if w.Status == "online" {
				up++
			}
		}
		if up == n {
			return ws.Workers
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers online, want %d: %+v", up, n, ws.Workers)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's state through the API
	}
}

// awaitRunning waits until job id's command says (on stderr, a log event) it is running.
func awaitRunning(c *client.Client, id string) {
	_, _ = c.Watch(context.Background(), id, 0, func(e wire.Event) error {
		if strings.Contains(string(e.Data), "running") {
			return errors.New("running")
		}
		return nil
	})
}

// A typo in the command refuses to start the worker, with the reason, before it takes a job:
// the queue is untouched.
func TestWorkerWithAMissingCommandRefusesToStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	c := client.New(s.url, "", nil)
	j, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "typo", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	workerRefuses(t, s, 2, []string{"--queue", "typo", "--", "/path/that/does/not/exist"}, "/path/that/does/not/exist", "cannot be run")
	if got, _ := c.Get(context.Background(), j.ID); got.Status != "queued" || got.Attempt != 0 {
		t.Fatalf("the job after the worker refused: %s attempt %d", got.Status, got.Attempt)
	}
}

// workerRefuses runs `tether worker --server s` with args, which must exit with code (2: a
// command-line mistake, with the usage) saying each of want, and leave no worker registered.
func workerRefuses(t *testing.T, s *server, code int, args []string, want ...string) {
	t.Helper()
	_, stderr, got := tether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, append([]string{"worker", "--server", s.url}, args...)...)
	if got != code {
		t.Fatalf("exit %d, want %d:\n%s", got, code, stderr)
	}
	if code == 2 {
		want = append(want, "usage")
	}
	mustContain(t, "stderr", stderr, want...)
	if ws, _ := client.New(s.url, "", nil).Workers(context.Background()); len(ws.Workers) != 0 {
		t.Fatalf("a worker that refused to start registered: %+v", ws.Workers)
	}
}

// SIGTERM stops a worker cleanly: it takes no new job, lets the running one try to finish
// within --grace, then stops it and gives its lease back with no attempt spent. The job's
// history says so.
func TestWorkerSIGTERMGivesItsJobBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	c := client.New(s.url, "", nil)
	w := startTether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "worker", "--server", s.url, "--queue", "q", "--grace", "1s",
		"--kill-grace", "2s", "--log-format", "json", "--", "sh", "-c", `echo running >&2; exec sleep 60`)
	w.waitFor(t, `"msg":"connected"`)
	j, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	awaitRunning(c, j.ID)
	next, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	w.signal(t, syscall.SIGTERM)
	if code := w.wait(30 * time.Second); code != 0 {
		t.Fatalf("the worker exited %d after SIGTERM:\n%s", code, w.output())
	}
	got, _ := c.Get(context.Background(), j.ID)
	if got.Status != "queued" || got.Attempt != 0 || got.DeadReason != "" {
		t.Fatalf("the running job after SIGTERM: %s attempt %d dead %q error %+v", got.Status, got.Attempt, got.DeadReason, got.Error)
	}
	evs, _ := c.Events(context.Background(), j.ID, 0)
	last := evs.Events[len(evs.Events)-1]
	if last.Type != "job.lease_released" || !strings.Contains(string(last.Data), "worker_stopping") {
		t.Fatalf("the history ends %s %s", last.Type, last.Data)
	}
	if got, _ := c.Get(context.Background(), next.ID); got.Status != "queued" || got.Attempt != 0 {
		t.Fatalf("the next job: %s attempt %d: it went to the stopping worker", got.Status, got.Attempt)
	}
}

// A worker registers once: a restart reuses the worker token it kept, so an enroll token of
// one use starts it any number of times, and the server shows one worker, not a ghost per
// start.
func TestWorkerRestartReusesItsRegistration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	const admin = "an-admin-token-for-the-test"
	s := startServer(t, dir, "--auth", "token", "--admin-token", admin)
	ac := client.New(s.url, admin, nil)
	key, err := ac.CreateAPIKey(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ac.CreateEnrollToken(context.Background(), "acme", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(s.url, key.Key, nil)
	// With no token and none kept, the worker says what to give.
	_, stderr, code := tether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "worker", "--server", s.url, "--queue", "q", "--", "cat")
	if code != 1 || !strings.Contains(stderr, "UNAUTHENTICATED") || !strings.Contains(stderr, "give an enroll token: --token ENROLL_TOKEN (see tether admin enroll-token)") {
		t.Fatalf("a worker with no token: exit %d, stderr %q", code, stderr)
	}
	state := t.TempDir()
	var ids []string
	for range 3 {
		w := startTether(t, []string{"XDG_STATE_HOME=" + state}, "worker", "--server", s.url, "--token", tok.Token, "--queue", "q",
			"--name", "lab-pc", "--log-format", "json", "--", "cat")
		w.waitFor(t, `"msg":"connected"`) // this process's connection, not the last one's
		ws := online(t, c, 1)
		ids = append(ids, ws[0].ID)
		w.signal(t, syscall.SIGTERM)
		if code := w.wait(30 * time.Second); code != 0 {
			t.Fatalf("exit %d:\n%s", code, w.output())
		}
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("three starts were three workers: %v", ids)
	}
	if ws, _ := c.Workers(context.Background()); len(ws.Workers) != 1 {
		t.Fatalf("%d workers registered, want 1: %+v", len(ws.Workers), ws.Workers)
	}
	files, _ := filepath.Glob(filepath.Join(state, "tether", "worker-lab-pc-*.json"))
	if len(files) != 1 {
		t.Fatalf("state files %v", files)
	}
	if fi, _ := os.Stat(files[0]); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the state file has mode %v, want 0600", fi.Mode().Perm())
	}
}

// A worker started before its server waits for it, as it waits for a server that restarts,
// and then registers and works.
func TestWorkerWaitsForItsServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	addr := freeAddr(t)
	w := startTether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "worker", "--server", addr, "--queue", "q", "--log-format", "json",
		"--", "sh", "-c", "cat")
	w.waitFor(t, "cannot be reached to register") // it tries, fails, and goes on trying
	startTether(t, nil, "server", "--data", t.TempDir(), "--addr", addr, "--log-format", "json")
	c := client.New("http://"+addr, "", nil)
	online(t, c, 1)
	j, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", Payload: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	status, err := c.Watch(context.Background(), j.ID, 0, func(wire.Event) error { return nil })
	if err != nil || status != "succeeded" {
		t.Fatalf("job %s: %v", status, err)
	}
}

// Two workers started alike on one machine (a service template, a second terminal) keep a
// registration each, instead of sharing one that the server would let only one of them connect
// as; started again, they take the same two.
func TestWorkersStartedAlikeKeepARegistrationEach(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	c := client.New(s.url, "", nil)
	state := t.TempDir()
	start := func() *process {
		w := startTether(t, []string{"XDG_STATE_HOME=" + state}, "worker", "--server", s.url, "--queue", "q", "--name", "lab-pc",
			"--log-format", "json", "--", "cat")
		w.waitFor(t, `"msg":"connected"`)
		return w
	}
	for round := range 2 {
		a, b := start(), start()
		ws := online(t, c, 2)
		names := map[string]bool{}
		for _, w := range ws {
			names[w.Name] = true
		}
		if len(ws) != 2 || !names["lab-pc"] || !names["lab-pc-2"] {
			t.Fatalf("round %d: workers %+v", round, ws)
		}
		for _, p := range []*process{a, b} {
			p.signal(t, syscall.SIGTERM)
			if code := p.wait(30 * time.Second); code != 0 {
				t.Fatalf("exit %d:\n%s", code, p.output())
			}
		}
	}
}

// A worker keeps its token in --token-file: it registers and writes the file (mode 0600) on
// its first start, rewrites it each time it renews the token, and a restart uses the newest
// one, after the first has stopped working. The job's program sees neither the token nor the
// file's path; --env passes what it is told to.
func TestWorkerTokenFileFollowsRenewals(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir(), "--worker-token-ttl", "10s")
	c := client.New(s.url, "", nil)
	file := filepath.Join(t.TempDir(), "worker-token")
	env := []string{"XDG_STATE_HOME=" + t.TempDir(), "TETHER_TOKEN_FILE=" + file, "SECRET_SAUCE=ketchup", "LAB=b12"}
	args := []string{"worker", "--server", s.url, "--queue", "q", "--log-format", "json", "--env", "LAB", "--env", "GPU=0,1",
		"--", "sh", "-c", `printf '"%s"' "$(env | grep -E '^(TETHER_TOKEN|TETHER_TOKEN_FILE|LAB|GPU|SECRET_SAUCE)=' | sort | tr '\n' ';')"`}
	w := startTether(t, env, args...)
	w.waitFor(t, `"msg":"registered"`)
	first, err := os.ReadFile(file)
	if err != nil || !strings.HasPrefix(string(first), "tw_") {
		t.Fatalf("the token file after registration: %q %v", first, err)
	}
	// Two renewals, 5 s apart: the first token has stopped working by the second.
	w.waitFor(t, `"msg":"worker token renewed"`)
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(w.output(), `"msg":"worker token renewed"`) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // another process's log
	}
	now, err := os.ReadFile(file)
	if fi, _ := os.Stat(file); err != nil || string(now) == string(first) || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token file after renewals: %q (mode %v) %v", now, fi.Mode().Perm(), err)
	}
	w.signal(t, syscall.SIGTERM)
	if code := w.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, w.output())
	}
	if st, _ := rawHeartbeat(t, s.url, strings.TrimSpace(string(first))); st != 401 {
		t.Fatalf("the first token answers %d", st)
	}

	w = startTether(t, env, args...)
	w.waitFor(t, `"msg":"connected"`)
	j, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t"})
	if err != nil {
		t.Fatal(err)
	}
	got := awaitJob(t, c, j.ID)
	var out string
	if got.Status != "succeeded" || json.Unmarshal(got.Output, &out) != nil {
		t.Fatalf("the restarted worker's job: %+v\n%s", got, w.output())
	}
	if out != "GPU=0,1;LAB=b12;SECRET_SAUCE=ketchup;" {
		t.Fatalf("the job's environment: %q", out)
	}
	if ws, _ := c.Workers(context.Background()); len(ws.Workers) != 1 {
		t.Fatalf("the restart registered again: %+v", ws.Workers)
	}
}

// awaitJob waits until job id is terminal and returns it.
func awaitJob(t *testing.T, c *client.Client, id string) *wire.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Watch(ctx, id, 0, func(wire.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	j, err := c.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// rawHeartbeat heartbeats no lease with a worker token and returns the status.
func rawHeartbeat(t *testing.T, server, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, server+"/v1/worker/heartbeat", strings.NewReader(`{"leases":[]}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A --token-file the worker could not write refuses to start before it registers: it would
// spend an enroll use, fail to keep the token, and leave a worker behind on every start.
// /proc/self is a directory that no one, root included, can make a file in.
func TestWorkerTokenFileThatCannotBeWrittenRefusesToStart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("no /proc")
	}
	s := startServer(t, t.TempDir())
	workerRefuses(t, s, 1, []string{"--queue", "q", "--token-file", "/proc/self/tether-token", "--", "cat"}, "/proc/self/tether-token", "cannot be written")
}

// Two workers given one --token-file would share one worker id, and the server lets one
// connection hold it: the second refuses to start, saying why, and the first works on.
func TestWorkersShareNoTokenFile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	s := startServer(t, t.TempDir())
	c := client.New(s.url, "", nil)
	file := filepath.Join(t.TempDir(), "worker-token")
	args := []string{"worker", "--server", s.url, "--queue", "q", "--token-file", file, "--log-format", "json", "--", "cat"}
	first := startTether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, args...)
	first.waitFor(t, `"msg":"connected"`)
	// The same file by its name, and through a link to it.
	link := filepath.Join(t.TempDir(), "link-to-worker-token")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, link} {
		second := startTether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, append(slices.Clone(args[:6]), append([]string{path}, args[7:]...)...)...)
		if code := second.wait(30 * time.Second); code != 1 {
			t.Fatalf("a second worker on one token file (as %s): exit %d:\n%s", path, code, second.output())
		}
		mustContain(t, "the second worker's output", second.output(), file, "another worker")
	}
	if ws := online(t, c, 1); len(ws) != 1 {
		t.Fatalf("workers %+v", ws)
	}
	j, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", Payload: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := awaitJob(t, c, j.ID); got.Status != "succeeded" {
		t.Fatalf("the first worker's job: %+v\n%s", got, first.output())
	}
	if strings.Contains(first.output(), "newer connection") {
		t.Fatalf("the first worker was displaced:\n%s", first.output())
	}
}

// A worker refused for the server's certificate says so and exits at once, as the README says,
// whether it has to register or has a registration stored: retrying does not mend a CA not
// given, and the worker used to retry its registration forever.
func TestWorkerRefusedForTheCertificateExits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	transporttest.WriteCert(t, cert, key, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	s := startServer(t, t.TempDir(), "--tls-cert", cert, "--tls-key", key)
	env := []string{"XDG_STATE_HOME=" + t.TempDir()}
	args := []string{"worker", "--server", s.url, "--queue", "q", "--log-format", "json", "--", "cat"}
	refused := func(what string) {
		t.Helper()
		w := startTether(t, env, args...)
		if code := w.wait(30 * time.Second); code != 1 {
			t.Fatalf("%s: exit %d:\n%s", what, code, w.output())
		}
		mustContain(t, what, w.output(), "certificate signed by unknown authority")
	}
	refused("a worker that registers")

	w := startTether(t, env, append([]string{"worker", "--ca-cert", cert}, args[1:]...)...)
	w.waitFor(t, `"msg":"connected"`) // registered, and kept in its state dir
	w.signal(t, syscall.SIGTERM)
	if code := w.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, w.output())
	}
	refused("a worker with a stored registration")
}

// A command told to stop that exits 0 with what it has never makes its job succeed, over
// either transport: a client's cancel ends the job cancelled with no output, and a worker's
// SIGTERM, once its --grace ran out, gives the job back unspent.
func TestWorkerCommandCutShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	// The trap answers the SIGTERM sent to the command's group; the sleep it waits for dies of
	// the same signal.
	const script = `trap 'echo "{\"stopped\":true}"; exit 0' TERM; echo running >&2; sleep 60 & wait`
	for _, tr := range []string{"websocket", "longpoll"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, t.TempDir())
			c := client.New(s.url, "", nil)
			w := startTether(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "worker", "--server", s.url, "--queue", "q",
				"--transport", tr, "--grace", "1s", "--kill-grace", "5s", "--log-format", "json", "--", "sh", "-c", script)
			w.waitFor(t, `"msg":"connected"`)

			cancelled, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", LeaseTTLSeconds: 6})
			if err != nil {
				t.Fatal(err)
			}
			awaitRunning(c, cancelled.ID)
			if _, err := c.Cancel(context.Background(), cancelled.ID); err != nil {
				t.Fatal(err)
			}
			if got := awaitJob(t, c, cancelled.ID); got.Status != "cancelled" || string(got.Output) != "null" {
				t.Fatalf("the cancelled job: %s output %s error %+v", got.Status, got.Output, got.Error)
			}

			stopped, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			awaitRunning(c, stopped.ID)
			w.signal(t, syscall.SIGTERM)
			if code := w.wait(30 * time.Second); code != 0 {
				t.Fatalf("the worker exited %d after SIGTERM:\n%s", code, w.output())
			}
			got, _ := c.Get(context.Background(), stopped.ID)
			if got.Status != "queued" || got.Attempt != 0 || string(got.Output) != "null" {
				t.Fatalf("the job the stop cut short: %s attempt %d output %s", got.Status, got.Attempt, got.Output)
			}
			evs, _ := c.Events(context.Background(), stopped.ID, 0)
			if last := evs.Events[len(evs.Events)-1]; last.Type != "job.lease_released" || !strings.Contains(string(last.Data), "worker_stopping") {
				t.Fatalf("the history ends %s %s", last.Type, last.Data)
			}
		})
	}
}

// A worker killed with SIGKILL leaves its job's command running (in its own process group,
// now the init's) and its lease held. The next start on the same state dir ends that command and
// gives the lease back at once (job.lease_released, worker_restarted, no attempt spent), so the
// restarted worker, of capacity 1, runs the job again long before the old lease would expire.
func TestWorkerKilledWithSIGKILLLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: the worker cannot tell a leftover from another process")
	}
	s := startServer(t, t.TempDir())
	c := client.New(s.url, "", nil)
	dir := t.TempDir()
	// The first run leaves a child behind and waits; once "again" exists, a run finishes.
	const script = `if [ -e "$JOBDIR/again" ]; then echo '{"ran":"again"}'; exit 0; fi
sleep 300 & echo $! > "$JOBDIR/child"; echo $$ > "$JOBDIR/leader"; echo running >&2; wait`
	env := []string{"XDG_STATE_HOME=" + filepath.Join(dir, "state"), "JOBDIR=" + dir}
	args := []string{"worker", "--server", s.url, "--queue", "q", "--capacity", "1", "--kill-grace", "2s", "--log-format", "json",
		"--env", "JOBDIR", "--", "sh", "-c", script}
	w := startTether(t, env, args...)
	w.waitFor(t, `"msg":"connected"`)
	j, err := c.Submit(context.Background(), wire.SubmitRequest{Queue: "q", Type: "t", MaxAttempts: 1, LeaseTTLSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	awaitRunning(c, j.ID)
	var pids []int
	for _, name := range []string{"leader", "child"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || perr != nil {
			t.Fatalf("the job's %s pid: %q %v %v", name, b, err, perr)
		}
		pids = append(pids, pid)
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	w.signal(t, syscall.SIGKILL)
	w.wait(30 * time.Second)
	for _, pid := range pids {
		if !processLives(pid) {
			t.Fatalf("process %d of the job ended with its worker; the test needs it left behind", pid)
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "again"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w = startTether(t, env, args...)
	got := awaitJob(t, c, j.ID) // within 30 s: the old lease had 300
	if got.Status != "succeeded" || string(got.Output) != `{"ran":"again"}` || got.Attempt != 1 {
		t.Fatalf("the job after the restart: %s attempt %d output %s\n%s", got.Status, got.Attempt, got.Output, w.output())
	}
	for _, pid := range pids {
		if processLives(pid) {
			t.Fatalf("process %d the killed worker's job left is still running", pid)
		}
	}
	evs, _ := c.Events(context.Background(), j.ID, 0)
	var released string
	for _, e := range evs.Events {
		if e.Type == "job.lease_released" {
			released = string(e.Data)
		}
	}
	if !strings.Contains(released, `"reason":"worker_restarted"`) || strings.Contains(released, "attempt_spent") {
		t.Fatalf("the old lease was released with %q, want worker_restarted and no attempt spent", released)
	}
	mustContain(t, "the restarted worker's log", w.output(), "LEFTOVER_ENDED")
}

// processLives reports whether pid is a process that has not ended (a zombie has: it waits
// only for its parent, here the init, to reap it).
func processLives(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && !strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}
