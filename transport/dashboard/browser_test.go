package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/transport"
	"github.com/tetherhq/tether/transport/client"
	"github.com/tetherhq/tether/transport/internal/testtool"
	"github.com/tetherhq/tether/transport/transporttest"
	"github.com/tetherhq/tether/transport/wire"
)

const adminToken = "dashboard-test-admin-token"

// TestDashboardInChromium drives the dashboard in headless Chromium against a real server under
// --auth token: it asks for an API key, shows a submitted job, streams the job's timeline live
// while a worker runs it, re-drives a dead job and cancels a live one, and logs nothing to the
// console on the way. Then it checks the phone layout.
func TestDashboardInChromium(t *testing.T) {
	browser := testtool.NewBrowser(t, 1280, 900, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := zaptest.NewLogger(t)
	b, err := broker.Open(broker.Config{Dir: t.TempDir(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	_, url := transporttest.Serve(t, b, transport.Config{Auth: transport.AuthToken, AdminToken: adminToken, Logger: log})
	admin := client.New(url, adminToken, nil)
	key, err := admin.CreateAPIKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	acme := client.New(url, key.Key, nil)

	// The page loads, asks for a key, and with it shows the (empty) overview.
	browser.Go(url + "/")
	browser.WaitFor("the API key dialog", `document.getElementById("auth").open`)
	browser.Type("#auth-key", key.Key)
	browser.Click("#auth-form button[type=submit]")
	browser.WaitFor("the empty overview", `document.querySelector("[data-test=queues] .empty")`)
	noConsoleErrors(t, browser)

	// A submitted job appears on the overview and in the job list.
	job, err := acme.Submit(ctx, wire.SubmitRequest{Queue: "renders", Type: "frame", Payload: json.RawMessage(`{"frame":7}`)})
	if err != nil {
		t.Fatal(err)
	}
	depth := browser.WaitFor("the queue's depth", `document.querySelector("[data-queue=renders] td[data-label=Depth]").textContent === "1" && "1"`)
	if depth != "1" {
		t.Fatalf("depth %q", depth)
	}
	// The queue pauses and resumes from the overview, and the API agrees each time.
	browser.Click(`[data-queue=renders] [data-action=pause]`)
	browser.WaitFor("the queue shown paused", `document.querySelector("[data-queue=renders][data-paused=true] .s-paused")`)
	if qs, err := acme.Queues(ctx); err != nil || len(qs.Queues) != 1 || !qs.Queues[0].Paused {
		t.Fatalf("after the dashboard paused it: %+v %v", qs, err)
	}
	browser.Click(`[data-queue=renders] [data-action=resume]`)
	browser.WaitFor("the queue shown active", `document.querySelector("[data-queue=renders][data-paused=false] [data-action=pause]")`)
	if qs, err := acme.Queues(ctx); err != nil || qs.Queues[0].Paused {
		t.Fatalf("after the dashboard resumed it: %+v %v", qs, err)
	}
	browser.Click(`nav a[data-nav=jobs]`)
	browser.WaitFor("the job in the list", query(fmt.Sprintf(`[data-job=%q] [data-status=queued]`, job.ID)))

	// Its page is open before a worker takes it; the timeline then grows as the worker leases
	// it, reports progress, and (once let go) completes it.
	browser.Go(url + "/#/jobs/" + job.ID)
	browser.WaitFor("the submitted event", `document.querySelector("[data-test=timeline] [data-event='job.submitted']")`)
	browser.WaitFor("why it waits: no worker yet", `document.querySelector("[data-test=explain] [data-code=no_worker_for_queue]")`)
	release := make(chan struct{})
	stopWorker := runWorker(t, url, ctx, release)
	browser.WaitFor("the lease, live", `document.querySelector("[data-test=timeline] [data-event='job.leased']")`)
	progress := browser.WaitFor("the progress event, live", `document.querySelector("[data-test=timeline] [data-event='job.progress']")?.textContent`)
	if !strings.Contains(progress, "progress") || !strings.Contains(progress, "half") {
		t.Fatalf("progress shown as %q", progress)
	}
	browser.WaitFor("the job shown leased", `document.querySelector("[data-test=job] [data-status=leased]")`)
	browser.WaitFor("explained as leased", `document.querySelector("[data-test=explain] [data-code=leased]")`)
	close(release)
	browser.WaitFor("the completion, live", `document.querySelector("[data-test=timeline] [data-event='job.succeeded']")`)
	browser.WaitFor("the stream's end", `document.querySelector("[data-test=stream-state]").textContent === "finished"`)
	browser.WaitFor("the job shown succeeded", `document.querySelector("[data-test=job] [data-status=succeeded]")`)
	var numbers string
	browser.Eval(&numbers, `return [...document.querySelectorAll("[data-test=timeline] li")].map(li => li.dataset.number).join(",")`)
	if numbers != "1,2,3,4" {
		t.Fatalf("timeline numbers %s, want 1,2,3,4 (submitted, leased, progress, succeeded), each once", numbers)
	}

	// A job that fails for good is on the dead-letter page; its re-drive button re-queues it.
	dead, err := acme.Submit(ctx, wire.SubmitRequest{Queue: "renders", Type: "frame", MaxAttempts: 1, Payload: json.RawMessage(`{"fail":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acme.Watch(ctx, dead.ID, 0, func(wire.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	stopWorker() // so the re-driven job stays queued
	browser.Go(url + "/#/dead")
	row := fmt.Sprintf(`[data-test=dead] [data-job=%q]`, dead.ID)
	browser.WaitFor("the dead job", query(row+" [data-action=retry]"))
	browser.Click(row + " [data-action=retry]")
	browser.WaitFor("the dead job gone from the list", "!"+query(row)+" && "+query("[data-test=dead] .empty"))
	if j, err := acme.Get(ctx, dead.ID); err != nil || j.Status != "queued" || j.Attempt != 1 {
		t.Fatalf("after the re-drive button: %+v %v, want queued", j, err)
	}

	// A live job's cancel button cancels it.
	browser.Go(url + "/#/jobs/" + dead.ID)
	browser.WaitFor("the cancel button", `document.querySelector("[data-action=cancel]")`)
	browser.Click("[data-action=cancel]")
	browser.WaitFor("the job shown cancelled", `document.querySelector("[data-test=job] [data-status=cancelled]")`)
	if j, err := acme.Get(ctx, dead.ID); err != nil || j.Status != "cancelled" {
		t.Fatalf("after the cancel button: %+v %v", j, err)
	}

	// A finished job's delete button asks once more, then deletes it; the page says it expired.
	browser.Click("[data-action=delete]")
	browser.WaitFor("the delete button armed", `document.querySelector("[data-action=delete]").dataset.armed === "1"`)
	browser.Click("[data-action=delete]")
	browser.WaitFor("the job list, the job deleted", `document.querySelector("[data-test=jobs]") && document.getElementById("toast").textContent === "Deleted `+dead.ID+`"`)
	var gone *client.Error
	if _, err := acme.Get(ctx, dead.ID); !errors.As(err, &gone) || gone.Code != "JOB_EXPIRED" {
		t.Fatalf("after the delete button: %v, want JOB_EXPIRED", err)
	}
	noConsoleErrors(t, browser)
	// Its page says it expired; the browser logs the 410 it got, and nothing else.
	browser.Go(url + "/#/jobs/" + dead.ID)
	browser.WaitFor("the job shown expired", `(document.querySelector("[data-test=job] .empty") || {textContent: ""}).textContent.includes("has expired")`)
	for _, e := range browser.ConsoleLog() {
		if !strings.Contains(e.Message, "status of 410") {
			t.Errorf("console %s (%s): %s", e.Level, e.Source, e.Message)
		}
	}

	// The dead-letter page purges by queue and age.
	browser.Go(url + "/#/dead")
	browser.WaitFor("the purge form", `document.querySelector("[data-test=purge]")`)
	browser.Type("[data-test=purge] input[name=queue]", "renders")
	browser.Eval(nil, `document.querySelector("[data-test=purge] select").value = "0"`)
	browser.Click("[data-test=purge] button[type=submit]")
	browser.WaitFor("the purge's answer", `document.getElementById("toast").textContent === "Purged 0 dead letters"`)
	noConsoleErrors(t, browser)

	// A flow is listed and drawn as its graph, each step with its status; its cancel button
	// cancels it, and the graph follows.
	flow, err := acme.SubmitFlow(ctx, "diamond", []byte("flow:\n  defaults: {queue: nobody}\n  steps: {a: {}, b: {needs: [a]}, c: {needs: [a]}, d: {needs: [b, c]}}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	browser.Click(`nav a[data-nav=flows]`)
	browser.WaitFor("the flow in the list", query(fmt.Sprintf(`[data-flow=%q] [data-status=running]`, flow.ID)))
	browser.Click(fmt.Sprintf(`[data-flow=%q] a`, flow.ID))
	browser.WaitFor("the graph", `document.querySelectorAll("[data-test=flow-graph] [data-step]").length === 4`)
	var drawn struct {
		Edges  int               `json:"edges"`
		Status map[string]string `json:"status"`
		Order  bool              `json:"order"`
		Waits  map[string]string `json:"waits"`
	}
	browser.Eval(&drawn, `const at = (s) => document.querySelector("[data-step=" + s + "]").transform.baseVal[0].matrix.e;
		return {edges: document.querySelectorAll("[data-test=flow-graph] [data-edge]").length,
		status: Object.fromEntries([...document.querySelectorAll("[data-step]")].map(n => [n.dataset.step, n.dataset.status])),
		order: at("a") < at("b") && at("b") === at("c") && at("c") < at("d"),
		waits: Object.fromEntries([...document.querySelectorAll("[data-waiting-for]")].map(n => [n.dataset.step, n.dataset.waitingFor]))}`)
	if drawn.Edges != 4 || !drawn.Order || drawn.Status["a"] != "queued" || drawn.Status["d"] != "waiting" {
		t.Fatalf("the graph: %+v, want 4 edges, a before b and c before d, a queued and d waiting", drawn)
	}
	// A waiting step says which of the steps it needs have not finished.
	if want := map[string]string{"b": "a", "c": "a", "d": "b, c"}; !maps.Equal(drawn.Waits, want) {
		t.Fatalf("the waiting steps say they wait for %v, want %v", drawn.Waits, want)
	}
	browser.Click("[data-action=cancel-flow]")
	browser.WaitFor("the steps shown cancelled and skipped", `document.querySelector("[data-step=a][data-status=cancelled]") && document.querySelector("[data-step=d][data-status=skipped]")`)
	if f, err := acme.Flow(ctx, flow.ID); err != nil || f.Status != "cancelled" {
		t.Fatalf("after the cancel button: %+v %v", f, err)
	}
	noConsoleErrors(t, browser)

	// A schedule is listed with its next tick; pause, resume and delete act on it.
	sched, err := acme.CreateSchedule(ctx, wire.ScheduleRequest{Name: "nightly", Cron: "30 2 * * *", Timezone: "Europe/Paris",
		Job: wire.SubmitRequest{Queue: "reports", Type: "daily"}})
	if err != nil {
		t.Fatal(err)
	}
	schedRow := fmt.Sprintf(`[data-schedule=%q]`, sched.ID)
	browser.Click(`nav a[data-nav=schedules]`)
	browser.WaitFor("the schedule in the list", query(schedRow+`[data-status=active]`))
	browser.Click(schedRow + ` [data-action=pause-schedule]`)
	browser.WaitFor("the schedule paused", query(schedRow+`[data-status=paused]`))
	if s, err := acme.Schedule(ctx, sched.ID); err != nil || s.Status != "paused" {
		t.Fatalf("after the pause button: %+v %v", s, err)
	}
	browser.Click(schedRow + ` [data-action=resume-schedule]`)
	browser.WaitFor("the schedule active again", query(schedRow+`[data-status=active]`))
	browser.Click(schedRow + ` [data-action=delete-schedule]`) // arms it
	browser.Click(schedRow + ` [data-action=delete-schedule]`)
	browser.WaitFor("the schedule gone", "!"+query(schedRow))
	if _, err := acme.Schedule(ctx, sched.ID); err == nil {
		t.Fatal("the delete button left the schedule")
	}
	noConsoleErrors(t, browser)

	// On a phone, tables stack into cards and nothing scrolls sideways.
	phone := testtool.NewBrowser(t, 390, 844, 20*time.Second)
	phone.Go(url + "/")
	phone.WaitFor("the API key dialog", `document.getElementById("auth").open`)
	phone.Type("#auth-key", key.Key)
	phone.Click("#auth-form button[type=submit]")
	phone.WaitFor("the queue on a phone", `document.querySelector("[data-queue=renders]")`)
	var layout struct {
		Overflow bool   `json:"overflow"`
		Display  string `json:"display"`
	}
	phone.Eval(&layout, `return {overflow: document.documentElement.scrollWidth > window.innerWidth,
		display: getComputedStyle(document.querySelector("[data-queue=renders]")).display}`)
	if layout.Overflow || layout.Display != "block" {
		t.Fatalf("phone layout: %+v, want no sideways scroll and rows as blocks", layout)
	}
	noConsoleErrors(t, phone)
}

// runWorker runs a worker of tenant acme on queue renders: it reports progress, waits for
// release, and answers; a payload with "fail" fails for good. The returned func stops it.
func runWorker(t *testing.T, url string, ctx context.Context, release chan struct{}) func() {
	t.Helper()
	admin := client.New(url, adminToken, nil)
	enroll, err := admin.CreateEnrollToken(ctx, "acme", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := client.New(url, enroll.Token, nil).RegisterWorker(ctx, wire.RegisterRequest{Name: "gpu-box", Queues: []string{"renders"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := &client.Worker{Server: url, Token: reg.WorkerToken, Capacity: 1, Logger: zaptest.NewLogger(t),
		Handler: func(ctx context.Context, j *client.Job) (any, error) {
			if strings.Contains(string(j.Payload), "fail") {
				return nil, &client.Failure{Code: "bad_frame", Message: "cannot render", Retryable: false}
			}
			if err := j.Event(ctx, "progress", map[string]string{"done": "half"}); err != nil {
				return nil, err
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return map[string]int{"frame": 7}, nil
		}}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			stop()
			<-done
		}
	}
	t.Cleanup(halt)
	return halt
}

// query is the JavaScript expression for the first element matching css.
func query(css string) string {
	quoted, _ := json.Marshal(css)
	return "document.querySelector(" + string(quoted) + ")"
}

// noConsoleErrors fails the test on any console error or failed request the page logged.
func noConsoleErrors(t *testing.T, b *testtool.Browser) {
	t.Helper()
	for _, e := range b.ConsoleLog() {
		if e.Level == "SEVERE" || e.Level == "WARNING" {
			t.Errorf("console %s (%s): %s", e.Level, e.Source, e.Message)
		}
	}
}

// The overview shows an archive segment a scrub found damaged, naming it and its records, and,
// once a good copy is back, a whole archive as one quiet line.
func TestDashboardShowsADamagedArchiveSegment(t *testing.T) {
	browser := testtool.NewBrowser(t, 1280, 900, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := zaptest.NewLogger(t)
	dir := t.TempDir()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := broker.Config{Dir: dir, Logger: log, Clock: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Archive: broker.ArchiveConfig{After: time.Minute, Every: 5 * time.Millisecond}}
	b, err := broker.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Submit(ctx, "default", "", actors.JobSpec{Queue: "q", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil { // a checkpoint of everything
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(5 * time.Minute)
	mu.Unlock()
	if b, err = broker.Open(cfg); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); b.Archive().Sealed == 0; {
		if time.Now().After(deadline) {
			t.Fatal("nothing was archived")
		}
		time.Sleep(5 * time.Millisecond) // polling the archiver, which looks every 5 ms
	}
	// A record in the hot log, where start-up reads: the segment is read by the scrub alone.
	if _, _, err := b.Submit(ctx, "default", "", actors.JobSpec{Queue: "q", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "archive", "seg-*.tseg"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v %v", segs, err)
	}
	seg, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	seg[40] ^= 1
	if err := os.WriteFile(segs[0], seg, 0o644); err != nil {
		t.Fatal(err)
	}

	cfg.Archive = broker.ArchiveConfig{ScrubEvery: time.Second} // a scrub at start, and each second
	if b, err = broker.Open(cfg); err != nil {
		t.Fatal(err)
	}
	_, url := transporttest.Serve(t, b, transport.Config{Auth: transport.AuthNone, Logger: log})
	browser.Go(url + "/")
	name := filepath.Base(segs[0])
	row := fmt.Sprintf(`[data-test=archive] [data-segment=%q]`, name)
	browser.WaitFor("the damaged segment", query("[data-test=archive] [data-archive=damaged]")+" && "+query(row))
	var shown string
	browser.Eval(&shown, `return `+query(row)+`.textContent`)
	if !strings.Contains(shown, "checksum does not match") || !strings.Contains(shown, "1..") {
		t.Errorf("the damaged segment's row: %q", shown)
	}
	noConsoleErrors(t, browser)

	if err := os.WriteFile(segs[0], append(seg[:40:40], append([]byte{seg[40] ^ 1}, seg[41:]...)...), 0o644); err != nil {
		t.Fatal(err)
	}
	browser.WaitFor("the archive whole again", query("[data-test=archive] [data-archive=whole]"))
}
