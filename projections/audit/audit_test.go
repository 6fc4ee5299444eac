package audit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/audit"
)

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// dataDir is what a real server left behind: a data dir written by the production runtime, and
// what its clients were told.
type dataDir struct {
	dir      string
	receipts []actors.Receipt
	jobs     []string // job ids, in submission order
	worker   string
}

// realDataDir runs a small workload through broker.Broker and closes it, which saves a
// checkpoint: jobs that succeed, one with progress, one that fails and is retried, one that
// fails for good, one cancelled while queued, and one left queued.
func realDataDir(t *testing.T) dataDir {
	t.Helper()
	d := dataDir{dir: t.TempDir()}
	b, err := broker.Open(broker.Config{Dir: d.dir})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := b.RegisterWorker(ctx(t), "acme", broker.WorkerSpec{Name: "w", Queues: []string{"q"}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	d.worker = reg.WorkerID
	s, err := b.Connect(ctx(t), reg.WorkerID, "websocket", 0)
	if err != nil {
		t.Fatal(err)
	}
	submit := func(spec actors.JobSpec) string {
		res, r, err := b.Submit(ctx(t), "acme", "key_1", spec)
		if err != nil {
			t.Fatal(err)
		}
		d.receipts = append(d.receipts, r)
		d.jobs = append(d.jobs, res[0].Job.ID)
		return res[0].Job.ID
	}
	next := func() actors.Assignment {
		for f := range s.Frames {
			if a, ok := f.(actors.Assignment); ok {
				return a
			}
		}
		t.Fatal("session ended")
		return actors.Assignment{}
	}
	complete := func(a actors.Assignment) {
		r, err := b.Complete(ctx(t), actors.Complete{WorkerID: d.worker, JobID: a.JobID, LeaseID: a.LeaseID, Nonce: a.Nonce, Output: json.RawMessage(`{"ok":true}`)})
		if err != nil {
			t.Fatal(err)
		}
		d.receipts = append(d.receipts, r)
	}
	s.Credit(1)
	for i := range 3 {
		submit(actors.JobSpec{Queue: "q", Type: "t", Payload: json.RawMessage(`{"i":` + string(rune('0'+i)) + `}`)})
		a := next()
		if i == 1 {
			if _, _, err := b.Event(ctx(t), actors.Progress{WorkerID: d.worker, JobID: a.JobID, LeaseID: a.LeaseID, Kind: "log", Data: json.RawMessage(`"half way"`)}); err != nil {
				t.Fatal(err)
			}
		}
		complete(a)
		s.Credit(1)
	}
	submit(actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 3})
	a := next()
	if _, err := b.Fail(ctx(t), actors.Fail{WorkerID: d.worker, JobID: a.JobID, LeaseID: a.LeaseID, Code: "oops", Message: "try again", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	s.Credit(1)
	submit(actors.JobSpec{Queue: "q", Type: "t", MaxAttempts: 3})
	a = next()
	if _, err := b.Fail(ctx(t), actors.Fail{WorkerID: d.worker, JobID: a.JobID, LeaseID: a.LeaseID, Code: "bad_input", Retryable: false}); err != nil {
		t.Fatal(err)
	}
	// No credit now: the next two stay queued; one is cancelled.
	submit(actors.JobSpec{Queue: "q", Type: "t"})
	cancelled := submit(actors.JobSpec{Queue: "q", Type: "t"})
	r, err := b.Cancel(ctx(t), "acme", "key_1", cancelled)
	if err != nil {
		t.Fatal(err)
	}
	d.receipts = append(d.receipts, r)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return d
}

// copyDir copies a data dir, so each tamper starts from the same real one.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func logKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("log/"), seq)
}

// tamper opens the store with Pebble itself, as an attacker with the disk would, and changes
// it: whatever it writes carries valid Pebble checksums.
func tamper(t *testing.T, dir string, change func(db *pebble.DB)) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	change(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

type quiet struct{}

func (quiet) Infof(string, ...any)  {}
func (quiet) Errorf(string, ...any) {}
func (quiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func get(t *testing.T, db *pebble.DB, key []byte) []byte {
	t.Helper()
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return bytes.Clone(v)
}

func set(t *testing.T, db *pebble.DB, key, value []byte) {
	t.Helper()
	if err := db.Set(key, value, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// verifyDir runs Verify on dir as `tether replay verify` does, Open's own checks included.
func verifyDir(t *testing.T, dir string) (audit.Summary, error) {
	t.Helper()
	l, err := audit.Open(dir)
	if err != nil {
		return audit.Summary{}, err
	}
	defer l.Close()
	return audit.Verify(ctx(t), l, nil)
}

func TestVerifyARealDataDir(t *testing.T) {
	d := realDataDir(t)
	var calls int
	l, err := audit.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := audit.Verify(ctx(t), l, func(done, total uint64) { calls++ })
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	last := d.receipts[len(d.receipts)-1]
	if sum.HeadSeq < last.Seq || sum.Records != sum.HeadSeq || sum.CheckpointSeq != sum.HeadSeq || calls == 0 {
		t.Fatalf("summary %+v (progress calls %d), last receipt %+v", sum, calls, last)
	}
	// 7 job streams and the worker's.
	if sum.Streams != 8 {
		t.Errorf("streams %d, want 8", sum.Streams)
	}
	want := map[projections.Status]int{projections.StatusSucceeded: 3, projections.StatusScheduled: 1, projections.StatusFailed: 1,
		projections.StatusQueued: 1, projections.StatusCancelled: 1, projections.StatusLeased: 0}
	for st, n := range want {
		if sum.Jobs[st] != n {
			t.Errorf("%s: %d jobs, want %d (all: %v)", st, sum.Jobs[st], n, sum.Jobs)
		}
	}
	if sum.Types["job.submitted"] != 7 || sum.Types["job.succeeded"] != 3 || sum.Types["job.dead_lettered"] != 1 {
		t.Errorf("types %v", sum.Types)
	}
	// The tenant has no events of its own stream here; its worker and queues are still shown.
	l, err = audit.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	at, head, err := audit.StateAt(ctx(t), l, l.Head().Seq, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer at.Close()
	st := audit.Summarize(at.Set, head)
	if len(st.Workers) != 1 || st.Workers[0].ID != d.worker || st.Workers[0].Status != "offline" ||
		len(st.Tenants) != 1 || len(st.Tenants[0].Queues) != 1 || st.Tenants[0].Queues[0].Depth != 1 {
		t.Fatalf("state at the head: %+v", st)
	}
	// Before any job, the worker's registration alone makes its tenant known.
	at, head, err = audit.StateAt(ctx(t), l, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer at.Close()
	if st := audit.Summarize(at.Set, head); len(st.Workers) != 1 || len(st.Tenants) != 1 {
		t.Fatalf("state at seq 1: %+v", st)
	}
}

// Every way of changing the record is named by its seq, Pebble's checksums notwithstanding.
func TestVerifyNamesTheTamperedSeq(t *testing.T) {
	d := realDataDir(t)
	k := d.receipts[0].Seq // the first job's job.submitted, with records after it
	rewrite := func(db *pebble.DB, seq uint64, rehash bool) {
		r, err := eventlog.DecodeRecord(get(t, db, logKey(seq)))
		if err != nil {
			t.Fatal(err)
		}
		// Change one letter of the last value: the record still decodes and folds.
		i := bytes.LastIndexFunc(r.Data, func(c rune) bool { return c >= 'a' && c <= 'y' })
		r.Data = bytes.Clone(r.Data)
		r.Data[i]++
		if rehash {
			// A careful forger recomputes the record's own hash; the next record then breaks.
			prev, err := eventlog.DecodeRecord(get(t, db, logKey(seq-1)))
			if err != nil {
				t.Fatal(err)
			}
			body := r.Encode()
			r.Hash = sha256.Sum256(append(prev.Hash[:], body[:len(body)-sha256.Size]...))
		}
		set(t, db, logKey(seq), r.Encode())
	}
	cases := []struct {
		name    string
		change  func(db *pebble.DB)
		wantSeq uint64
	}{
		{"data rewritten", func(db *pebble.DB) { rewrite(db, k, false) }, k},
		{"data rewritten and rehashed", func(db *pebble.DB) { rewrite(db, k, true) }, k + 1},
		{"record deleted", func(db *pebble.DB) {
			if err := db.Delete(logKey(k), pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}, k},
		{"two records swapped", func(db *pebble.DB) {
			a, b := get(t, db, logKey(k)), get(t, db, logKey(k+3))
			set(t, db, logKey(k), b)
			set(t, db, logKey(k+3), a)
		}, k},
		{"head record rewritten", func(db *pebble.DB) {
			it, _ := db.NewIter(&pebble.IterOptions{LowerBound: []byte("log/"), UpperBound: []byte("log0")})
			it.Last()
			head := binary.BigEndian.Uint64(it.Key()[4:])
			it.Close()
			rewrite(db, head, false)
		}, 0}, // filled in below: the head's seq
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir(t, d.dir)
			tamper(t, dir, c.change)
			_, err := verifyDir(t, dir)
			if err == nil {
				t.Fatal("a tampered log verified")
			}
			want := c.wantSeq
			if want == 0 {
				want = headSeq(t, d.dir)
			}
			if got := audit.BadSeq(err); got != want {
				t.Fatalf("error names seq %d, want %d: %v", got, want, err)
			}
		})
	}
}

func headSeq(t *testing.T, dir string) uint64 {
	t.Helper()
	l, err := audit.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Head().Seq
}

func TestVerifyRefusesACheckpointThatDisagrees(t *testing.T) {
	d := realDataDir(t)
	dir := copyDir(t, d.dir)
	key := []byte("ckpt/" + projections.CheckpointName)
	tamper(t, dir, func(db *pebble.DB) {
		v := get(t, db, key)
		// Keep the seq and hash the checkpoint is tagged with; change what it says.
		v = bytes.Replace(v, []byte(`"succeeded"`), []byte(`"cancelled"`), 1)
		set(t, db, key, v)
	})
	_, err := verifyDir(t, dir)
	var ce *audit.CheckpointError
	if !errors.As(err, &ce) || ce.Seq != headSeq(t, d.dir) {
		t.Fatalf("got %v, want a CheckpointError at the head seq %d", err, headSeq(t, d.dir))
	}
}

func TestVerifyChecksTheStreamIndex(t *testing.T) {
	d := realDataDir(t)
	dir := copyDir(t, d.dir)
	tamper(t, dir, func(db *pebble.DB) {
		// Point one of the job's index keys at the next seq instead: its history would show
		// another record in its place.
		prefix := []byte("idx/job/" + d.jobs[0] + "\x00")
		it, _ := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: append(bytes.Clone(prefix), 0xff)})
		it.First()
		old := bytes.Clone(it.Key())
		it.Close()
		moved := binary.BigEndian.AppendUint64(bytes.Clone(old[:len(old)-8]), binary.BigEndian.Uint64(old[len(old)-8:])+1)
		if err := db.Delete(old, pebble.Sync); err != nil {
			t.Fatal(err)
		}
		set(t, db, moved, nil)
	})
	if _, err := verifyDir(t, dir); err == nil || !strings.Contains(err.Error(), "index") {
		t.Fatalf("got %v, want the index reported", err)
	}
}

func TestOpenRefusesALogInUse(t *testing.T) {
	d := realDataDir(t)
	l, err := eventlog.Open(d.dir, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := audit.Open(d.dir); !errors.Is(err, eventlog.ErrInUse) {
		t.Fatalf("got %v, want ErrInUse", err)
	}
}

func TestHistoryTellsTheJobsStory(t *testing.T) {
	d := realDataDir(t)
	l, err := audit.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	story := func(id string) (types, texts []string) {
		if _, err := audit.History(l, id, func(e audit.Entry) error {
			types = append(types, e.Type)
			texts = append(texts, e.Text)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return types, texts
	}
	types, texts := story(d.jobs[1])
	if strings.Join(types, " ") != "job.submitted job.leased job.progress job.succeeded" {
		t.Fatalf("types %v", types)
	}
	for i, want := range []string{"tenant acme (API key key_1) to queue q", "leased to worker " + d.worker + ", attempt 1", `log under lease`, "succeeded on attempt 1"} {
		if !strings.Contains(texts[i], want) {
			t.Errorf("line %d %q lacks %q", i, texts[i], want)
		}
	}
	types, texts = story(d.jobs[3])
	if strings.Join(types, " ") != "job.submitted job.leased job.failed job.retry_scheduled" ||
		!strings.Contains(texts[2], "oops: try again") || !strings.Contains(texts[3], "backoff") {
		t.Fatalf("retried job: %v %q", types, texts)
	}
	if _, err := audit.History(l, "01NOSUCHJOB", func(audit.Entry) error { return nil }); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

func TestReceiptsAreConfirmed(t *testing.T) {
	d := realDataDir(t)
	l, err := audit.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, r := range d.receipts {
		if _, _, err := audit.CheckReceipt(ctx(t), l, r.Seq, r.Hash); err != nil {
			t.Fatalf("receipt %+v: %v", r, err)
		}
	}
	r := d.receipts[2]
	other := d.receipts[3].Hash
	if _, _, err := audit.CheckReceipt(ctx(t), l, r.Seq, other); !errors.Is(err, audit.ErrReceiptMismatch) {
		t.Fatalf("a receipt with another seq's hash: %v", err)
	}
	if _, _, err := audit.CheckReceipt(ctx(t), l, l.Head().Seq+1, r.Hash); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("a receipt beyond the head: %v", err)
	}
	if _, _, err := audit.CheckReceipt(ctx(t), l, r.Seq, "zz"); err == nil {
		t.Fatal("a malformed hash was accepted")
	}
}

func TestExportVerifiesWithoutTheLog(t *testing.T) {
	d := realDataDir(t)
	l, err := audit.Open(d.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	head := l.Head()
	export := func(from, to uint64) []byte {
		var buf bytes.Buffer
		n, err := audit.Export(ctx(t), l, &buf, from, to, nil)
		if err != nil {
			t.Fatal(err)
		}
		if lines := uint64(bytes.Count(buf.Bytes(), []byte("\n"))); lines != n {
			t.Fatalf("%d lines for %d records", lines, n)
		}
		return buf.Bytes()
	}
	whole := export(1, 0)
	sum, err := audit.VerifyExport(ctx(t), bytes.NewReader(whole))
	if err != nil {
		t.Fatal(err)
	}
	if !sum.FromGenesis || sum.Records != head.Seq || sum.HeadHash != head.Hash.String() {
		t.Fatalf("whole export: %+v, head %d %s", sum, head.Seq, head.Hash)
	}

	// A slice verifies on its own, anchored at the hash of the record before it.
	part := export(5, 9)
	sum, err = audit.VerifyExport(ctx(t), bytes.NewReader(part))
	if err != nil {
		t.Fatal(err)
	}
	r4, _ := l.Get(4)
	r9, _ := l.Get(9)
	if sum.FirstSeq != 5 || sum.LastSeq != 9 || sum.Anchor != r4.Hash.String() || sum.HeadHash != r9.Hash.String() || sum.FromGenesis {
		t.Fatalf("slice: %+v", sum)
	}

	lines := bytes.SplitAfter(whole, []byte("\n"))
	edited := bytes.Join(append(append([][]byte{}, lines[:6]...), append([][]byte{bytes.Replace(lines[6], []byte(`"data":{`), []byte(`"data":{ `), 1)}, lines[7:]...)...), nil)
	if bytes.Equal(edited, whole) {
		t.Fatal("the edit changed nothing")
	}
	if _, err := audit.VerifyExport(ctx(t), bytes.NewReader(edited)); audit.BadSeq(err) != 7 {
		t.Fatalf("an edited line: %v, want seq 7 named", err)
	}
	dropped := bytes.Join(append(append([][]byte{}, lines[:3]...), lines[4:]...), nil)
	if _, err := audit.VerifyExport(ctx(t), bytes.NewReader(dropped)); audit.BadSeq(err) != 4 {
		t.Fatalf("a dropped line: %v, want seq 4 named", err)
	}
	if _, err := audit.VerifyExport(ctx(t), strings.NewReader("")); err == nil {
		t.Fatal("an empty export verified")
	}
}

// A checkpoint an earlier build wrote in an older format is not compared, and says so.
func TestVerifySkipsAnOlderCheckpointFormat(t *testing.T) {
	d := realDataDir(t)
	dir := copyDir(t, d.dir)
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SaveCheckpoint(projections.CheckpointName, 3, []byte(`{"seq":3,"jobs":null,"version":"tether.projections.v1"}`)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	sum, err := verifyDir(t, dir)
	if err != nil || sum.CheckpointSeq != 0 || !strings.Contains(sum.CheckpointSkipped, "seq 3") {
		t.Fatalf("an older checkpoint: %v, %+v", err, sum)
	}
}

// A checkpoint in the middle of the log, with the table saved with it, is compared with the
// replay at its own seq. One at seq 0 (of the empty log) is always compared after the walk, the
// path a checkpoint that loads after the fold has passed its seq takes. A change to the
// checkpoint, to a job in the table, or to the table's indexes is found.
func TestVerifyComparesACheckpointMidLog(t *testing.T) {
	d := realDataDir(t)
	for _, k := range []uint64{9, 0} {
		for _, corrupt := range []string{"", "checkpoint", "table job", "table index"} {
			if k == 0 && strings.HasPrefix(corrupt, "table") {
				continue // the empty log has no table
			}
			dir := copyDir(t, d.dir)
			l, err := eventlog.Open(dir, eventlog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			set, _, err := audit.StateAt(ctx(t), l, k, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer set.Close()
			// The server's table is at its last checkpoint, the head: start the one at k afresh.
			if err := l.ClearViews(projections.CheckpointName); err != nil {
				t.Fatal(err)
			}
			data, writes, err := set.BeginFlush().Encode()
			if err != nil {
				t.Fatal(err)
			}
			if k > 0 && len(writes) == 0 {
				t.Fatal("no finished job by seq 9: the table is not exercised")
			}
			changed := false
			switch corrupt {
			case "checkpoint":
				data, changed = bytes.Replace(data, []byte(`"version":"`), []byte(`"version":"x`), 1), true
			case "table job":
				writes[0].Value, changed = bytes.Replace(writes[0].Value, []byte(`"attempt":`), []byte(`"attempt":1`), 1), true
			case "table index":
				writes, changed = writes[:len(writes)-1], true
			}
			if corrupt != "" && !changed {
				t.Fatal("the corruption changed nothing")
			}
			if err := l.SaveCheckpoint(projections.CheckpointName, k, data, writes...); err != nil {
				t.Fatal(err)
			}
			l.Close()
			sum, err := verifyDir(t, dir)
			if err == nil && sum.CheckpointSkipped != "" {
				t.Fatalf("checkpoint at seq %d skipped: %s", k, sum.CheckpointSkipped)
			}
			var ce *audit.CheckpointError
			switch {
			case corrupt != "" && (!errors.As(err, &ce) || ce.Seq != k):
				t.Fatalf("a checkpoint at seq %d with a corrupt %s: %v", k, corrupt, err)
			case corrupt == "" && (err != nil || sum.CheckpointSeq != k):
				t.Fatalf("a good checkpoint at seq %d: %v, %+v", k, err, sum)
			case corrupt == "" && k > 0 && sum.TableJobs == 0:
				t.Fatalf("a good checkpoint at seq %d: no job in its table", k)
			}
		}
	}
}

// TestHistoryOfAFlowAndASchedule: history reads a flow's or a schedule's stream as it reads a
// job's, in words.
func TestHistoryOfAFlowAndASchedule(t *testing.T) {
	t.Parallel()
	l, err := eventlog.Open(t.TempDir(), eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	at := time.Date(2026, 11, 24, 2, 30, 0, 0, time.UTC)
	var evs []eventlog.Event
	for _, p := range []eventlog.Payload{
		eventlog.FlowSubmitted{FlowID: "F", Tenant: "acme", Name: "nightly", Steps: []eventlog.FlowStep{{Name: "a", JobTemplate: eventlog.JobTemplate{Queue: "q", Type: "a"}}}},
		eventlog.FlowEnded{FlowID: "F", Status: eventlog.FlowFailed, Step: "a"},
		eventlog.ScheduleCreated{ScheduleID: "S", Tenant: "acme", Name: "n", Cron: "30 2 * * *", Timezone: "UTC", Job: eventlog.JobTemplate{Queue: "q", Type: "t"}},
		eventlog.ScheduleSkipped{ScheduleID: "S", From: at, To: at.Add(24 * time.Hour), Reason: eventlog.SkippedTickMissed, Ticks: 2},
	} {
		ev, err := eventlog.NewEvent(p.Stream(), p)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if _, err := l.Append(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"F": "ended failed at step a", "S": "skipped 2 ticks 2026-11-24T02:30:00Z to 2026-11-25T02:30:00Z (missed)"} {
		var last string
		if _, err := audit.History(l, id, func(e audit.Entry) error { last = e.Text; return nil }); err != nil || last != want {
			t.Errorf("history of %s ends %q, %v; want %q", id, last, err, want)
		}
	}
}
