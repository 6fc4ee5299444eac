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
	"sync"
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
)

// archivedDataDir makes a stopped server's data dir whose archive holds four segments, with
// a job whose submit is in the first segment and whose cancel is in the second (spanning), and
// a job whose records are all in the hot log (hot). It returns the segments' names, oldest
// first.
func archivedDataDir(t *testing.T) (dir string, segs []string, spanning, hot string) {
	t.Helper()
	dir = t.TempDir()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := broker.Config{Dir: dir, Archive: broker.ArchiveConfig{After: time.Minute, Every: 5 * time.Millisecond},
		Clock: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	ctx := context.Background()
	submit := func(b *broker.Broker, n int) string {
		var id string
		for range n {
			res, _, err := b.Submit(ctx, "default", "", actors.JobSpec{Queue: "q", Type: "t"})
			if err != nil {
				t.Fatal(err)
			}
			id = res[0].Job.ID
		}
		return id
	}
	for i := range 5 {
		b, err := broker.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// What the last run wrote is old enough now, and checkpointed: the archiver, which
		// looks every few milliseconds, seals it.
		for deadline := time.Now().Add(30 * time.Second); i > 0 && b.Archive().Sealed == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("run %d: nothing was archived", i)
			}
			time.Sleep(5 * time.Millisecond) // polling the archiver's goroutine
		}
		switch i {
		case 0:
			spanning = submit(b, 20)
		case 1:
			if _, err := b.Cancel(ctx, "default", "", spanning); err != nil {
				t.Fatal(err)
			}
			submit(b, 20)
		case 4:
			hot = submit(b, 1)
		default:
			submit(b, 20)
		}
		if err := b.Close(); err != nil { // a checkpoint of everything
			t.Fatal(err)
		}
		mu.Lock()
		now = now.Add(5 * time.Minute)
		mu.Unlock()
	}
	entries, err := os.ReadDir(filepath.Join(dir, "archive"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		segs = append(segs, e.Name())
	}
	slices.Sort(segs)
	if len(segs) != 4 {
		t.Fatalf("segments %v, want 4", segs)
	}
	return dir, segs, spanning, hot
}

// Segments taken from a stopped server's archive, as operators and accidents take them: the
// server refuses to start on any hole (naming what is missing), replay verify fails and still
// checks every segment it has, replay history says which records it could not read; only the
// oldest segments may go, and then reads of what they held answer HISTORY_GONE, not an empty
// page.
func TestArchiveGapsThroughTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	seg := func(dir, name string) string { return filepath.Join(dir, "archive", name) }
	remove := func(t *testing.T, path string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	tamper := func(t *testing.T, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[40] ^= 1 // inside the first frame
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string, segs []string)
		// what the server's refusal, verify's report and history's stderr must name
		server, verify, history []string
	}{
		{"archive directory moved away", func(t *testing.T, dir string, _ []string) {
			if err := os.Rename(filepath.Join(dir, "archive"), filepath.Join(dir, "archive.moved")); err != nil {
				t.Fatal(err)
			}
		}, []string{"archive", "is not there"}, []string{"MISSING", "is not there"}, []string{"records 1..", "is not there"}},
		{"newest segment deleted", func(t *testing.T, dir string, segs []string) {
			remove(t, seg(dir, segs[3]))
		}, []string{"the newest segments, after seg-"}, []string{"MISSING", "the chain holds"}, nil},
		{"middle segment deleted, oldest tampered", func(t *testing.T, dir string, segs []string) {
			remove(t, seg(dir, segs[1]))
			tamper(t, seg(dir, segs[0]))
		}, []string{"between"}, []string{"MISSING", "between", "FAILED"}, []string{"seg-00000000000000000001-", "checksum"}},
		{"two segments swapped under each other's names", func(t *testing.T, dir string, segs []string) {
			a, b, tmp := seg(dir, segs[1]), seg(dir, segs[2]), seg(dir, "swap")
			if err := errors.Join(os.Rename(a, tmp), os.Rename(b, a), os.Rename(tmp, b)); err != nil {
				t.Fatal(err)
			}
		}, []string{"which its name does not say"}, []string{"MISSING", "FAILED"}, []string{"MISSING: records"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, segs, spanning, _ := archivedDataDir(t)
			c.damage(t, dir, segs)

			_, stderr, code := tether(t, nil, "server", "--data", dir, "--addr", "127.0.0.1:0")
			if code == 0 {
				t.Fatal("the server started on an archive with a hole")
			}
			mustContain(t, "the server's refusal", stderr, c.server...)
			t.Logf("the server:\n%s", stderr)

			out, stderr, code := tether(t, nil, "replay", "verify", "--data", dir)
			if code == 0 {
				t.Fatalf("replay verify passed an archive with a hole:\n%s", out)
			}
			mustContain(t, "replay verify", out+stderr, c.verify...)
			t.Logf("replay verify:\n%s%s", out, stderr)

			if c.history != nil {
				out, stderr, code = tether(t, nil, "replay", "history", "--data", dir, spanning)
				if code == 0 {
					t.Fatalf("replay history of a job with records in a hole passed:\n%s%s", out, stderr)
				}
				mustContain(t, "replay history", stderr, c.history...)
			}
		})
	}

	// A byte of a segment changed where no start-up read looks (its stream table): the server
	// starts, and the first read of the segment checks its checksum and answers HISTORY_GONE,
	// as JSON and before an SSE stream's headers; replay verify fails.
	t.Run("a segment's stream table changed", func(t *testing.T) {
		dir, segs, spanning, _ := archivedDataDir(t)
		path := seg(dir, segs[0])
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-156-1] ^= 1 // the last stream table entry, before the trailer
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, stderr, code := tether(t, nil, "replay", "verify", "--data", dir)
		if code == 0 {
			t.Fatalf("replay verify passed a changed segment:\n%s", out)
		}
		mustContain(t, "replay verify", out+stderr, "FAILED", segs[0], "checksum")
		s := startServer(t, dir)
		for _, accept := range []string{"application/json", "text/event-stream"} {
			status, code, _ := eventsAnswer(t, s.url, spanning, accept)
			if status != http.StatusGone || code != "HISTORY_GONE" {
				t.Fatalf("events (%s) of a job in a changed segment: %d %s", accept, status, code)
			}
		}
	})

	// Another log's oldest segment in place of this log's (the same seqs, so the same name;
	// this log's is kept aside under a name the archive does not read): the server refuses,
	// verify and history fail, and no receipt of the other log is confirmed.
	t.Run("a foreign segment in place of the log's own", func(t *testing.T) {
		dir, segs, spanning, _ := archivedDataDir(t)
		otherDir, otherSegs, _, _ := archivedDataDir(t)
		if otherSegs[0] != segs[0] {
			t.Fatalf("the two logs' oldest segments are %s and %s, want the same seqs", segs[0], otherSegs[0])
		}
		b, err := os.ReadFile(seg(otherDir, otherSegs[0]))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(seg(dir, segs[0]), seg(dir, segs[0]+".genuine")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(seg(dir, segs[0]), b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := tether(t, nil, "server", "--data", dir, "--addr", "127.0.0.1:0")
		if code == 0 {
			t.Fatal("the server started with a foreign segment in place of its own")
		}
		mustContain(t, "the server's refusal", stderr, "does not chain")
		out, _, code := tether(t, nil, "replay", "verify", "--data", dir)
		if code == 0 {
			t.Fatalf("replay verify passed a foreign segment:\n%s", out)
		}
		out, stderr, code = tether(t, nil, "replay", "history", "--data", dir, spanning)
		if code == 0 {
			t.Fatalf("replay history over a foreign segment passed:\n%s%s", out, stderr)
		}
		export, _, _ := tether(t, nil, "replay", "export", "--data", otherDir, "--from", "1", "--to", "1")
		var first struct{ Hash string }
		if err := json.Unmarshal([]byte(export), &first); err != nil {
			t.Fatal(err)
		}
		out, _, code = tether(t, nil, "replay", "receipt", "--data", dir, "--seq", "1", "--hash", first.Hash)
		if code == 0 {
			t.Fatalf("a receipt of the foreign log was confirmed:\n%s", out)
		}
	})

	t.Run("oldest segments deleted", func(t *testing.T) {
		dir, segs, spanning, hot := archivedDataDir(t)
		remove(t, seg(dir, segs[0]))
		out, stderr, code := tether(t, nil, "replay", "verify", "--data", dir)
		if code != 0 {
			t.Fatalf("replay verify failed when only the oldest segment is gone:\n%s%s", out, stderr)
		}
		mustContain(t, "replay verify", out, "pruned", "the oldest segments", "the chain holds")
		out, stderr, code = tether(t, nil, "replay", "history", "--data", dir, hot)
		if code != 0 || !strings.Contains(out, "verifies") {
			t.Fatalf("history of a job in the hot log: %d\n%s%s", code, out, stderr)
		}

		// What is still here is still confirmed and exported, from the oldest record here.
		export, stderr, code := tether(t, nil, "replay", "export", "--data", dir)
		lines := strings.Split(strings.TrimSpace(export), "\n")
		var last struct {
			Seq  uint64
			Hash string
		}
		if code != 0 || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil {
			t.Fatalf("export after the oldest segment was deleted: %d %s", code, stderr)
		}
		out, stderr, code = tether(t, nil, "replay", "receipt", "--data", dir, "--seq", strconv.FormatUint(last.Seq, 10), "--hash", last.Hash)
		if code != 0 || !strings.Contains(out, "confirmed") {
			t.Fatalf("a receipt of a record still here: %d\n%s%s", code, out, stderr)
		}
		out, _, _ = tether(t, nil, "replay", "verify", "--data", dir, "--archive", filepath.Join(dir, "archive"), "--json")
		var sum struct{ Gaps []struct{ Pruned bool } }
		if json.Unmarshal([]byte(out), &sum) != nil || len(sum.Gaps) != 1 || !sum.Gaps[0].Pruned {
			t.Fatalf("verify --json: %s", out)
		}

		s := startServer(t, dir)
		for _, accept := range []string{"application/json", "text/event-stream"} {
			status, code, details := eventsAnswer(t, s.url, spanning, accept)
			if status != http.StatusGone || code != "HISTORY_GONE" || details.First != 1 || !details.Pruned {
				t.Fatalf("events (%s) of a job whose submit was in a deleted segment: %d %s %+v", accept, status, code, details)
			}
		}
	})
}

type gapDetails struct {
	First, Last uint64
	Pruned      bool
}

// eventsAnswer asks for a job's events, as JSON or SSE, and returns the answer's status and
// error code and details.
func eventsAnswer(t *testing.T, url, job, accept string) (int, string, gapDetails) {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/v1/jobs/"+job+"/events", nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Code    string
			Details gapDetails
		}
	}
	_ = json.Unmarshal(body, &e)
	return resp.StatusCode, e.Error.Code, e.Error.Details
}

// A byte flipped inside a sealed segment, where start-up does not look: the server starts
// ready, and its scrub, with no read of those records, logs ARCHIVE_DAMAGED naming the segment
// (once, however many scrubs find it), counts it in /metrics and names it in GET /v1/archive.
func TestTheScrubFindsADamagedSegment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir, segs, _, _ := archivedDataDir(t)
	path := filepath.Join(dir, "archive", segs[1])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[40] ^= 1 // inside the first frame
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, dir, "--archive-scrub-every", "1s")
	metric := func(name string) float64 {
		resp, err := http.Get(s.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(body)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %q", name, line)
				}
				return f
			}
		}
		t.Fatalf("/metrics has no %s:\n%s", name, body)
		return 0
	}
	for deadline := time.Now().Add(60 * time.Second); metric("tether_archive_scrubs_total") < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("three scrubs did not end within a minute:\n%s", s.log)
		}
		time.Sleep(50 * time.Millisecond) // polling the server's scrubs, each a second apart
	}
	if n := metric("tether_archive_damaged_segments"); n != 1 {
		t.Errorf("tether_archive_damaged_segments %v, want 1", n)
	}
	if n := metric("tether_archive_scrub_last_end_timestamp_seconds"); n < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("tether_archive_scrub_last_end_timestamp_seconds %v", n)
	}
	var logged []string
	for line := range strings.Lines(s.log.String()) {
		if strings.Contains(line, `"ARCHIVE_DAMAGED"`) {
			logged = append(logged, line)
		}
	}
	if len(logged) != 1 || !strings.Contains(logged[0], segs[1]) || !strings.Contains(logged[0], "checksum") {
		t.Errorf("ARCHIVE_DAMAGED logged %d times in three scrubs, want once naming %s:\n%s", len(logged), segs[1], logged)
	}
	resp, err := http.Get(s.url + "/v1/archive")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var arch struct {
		Segments int
		Damaged  []struct {
			Segment string
			Reason  string
		}
		Scrub struct {
			EverySeconds float64 `json:"every_seconds"`
			Passes       uint64
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&arch); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/archive: %d %v", resp.StatusCode, err)
	}
	if arch.Segments != 4 || len(arch.Damaged) != 1 || arch.Damaged[0].Segment != segs[1] || arch.Damaged[0].Reason != "its checksum does not match its contents" ||
		arch.Scrub.EverySeconds != 1 || arch.Scrub.Passes < 3 {
		t.Errorf("GET /v1/archive: %+v", arch)
	}
}
