package eventlog_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog"
)

func TestKeySpan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ key, end string }{
		{"ckpt/projections", "ckpt0"},
		{"idx/job/01J\x00\x00\x00\x00\x00\x00\x00\x00\x07", "idx/job0"},
		{"idx/worker/w1\x00\x00\x00\x00\x00\x00\x00\x00\x07", "idx/worker0"},
		{"idx/tenant/default\x00\x00\x00\x00\x00\x00\x00\x00\x07", "idx/tenant0"},
		{"idx/odd\x00\x00\x00\x00\x00\x00\x00\x00\x07", "idx0"},
		{"log/\x00\x00\x00\x00\x00\x00\x00\x07", "log0"},
		{"meta/anchor", "meta0"},
		{"view/j01J", "view/k"},
		{"view/ldefault\x00\x00", "view/m"},
		{"view/\xff", "view0"},
		{"view/", "view0"},
		{"x", "y"},
	} {
		_, end, err := eventlog.KeySpan([]byte(tc.key))
		if err != nil || string(end) != tc.end {
			t.Errorf("KeySpan(%q) ends at %q, %v; want %q", tc.key, end, err, tc.end)
		}
		if bytes.Compare([]byte(tc.key), end) >= 0 {
			t.Errorf("KeySpan(%q) ends at %q, not after the key", tc.key, end)
		}
	}
}

// A flush cuts its tables at the spans: no table holds keys of two, so that a compaction of
// one span's table leaves the others' where they are.
func TestTablesCutAtSpans(t *testing.T) {
	t.Parallel()
	l, err := eventlog.Open("/data", eventlog.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i := range 50 {
		evs := []eventlog.Event{
			{Stream: fmt.Sprintf("job/%03d", i), Type: "job.submitted", Data: []byte(`{"n":1}`)},
			{Stream: "tenant/default", Type: "tenant.quota", Data: []byte(`{}`)},
			{Stream: fmt.Sprintf("worker/w%d", i%3), Type: "worker.seen", Data: []byte(`{}`)},
		}
		if _, err := l.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
	}
	writes := []eventlog.ViewWrite{
		{Key: []byte("j001"), Value: []byte(`{"id":"001"}`)},
		{Key: []byte("ldefault\x00\x00001"), Value: nil},
		{Key: []byte("d\x00\x00\x00\x00\x00\x00\x00\x01001")},
	}
	if err := l.SaveCheckpoint("projections", l.Head().Seq, []byte("snapshot"), writes...); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	tables, err := l.TableBounds()
	if err != nil {
		t.Fatal(err)
	}
	// ckpt/, idx/job/, idx/tenant/, idx/worker/, log/, meta/, view/d, view/j, view/l
	if len(tables) < 9 {
		t.Errorf("the flush wrote %d tables, want one per span (9)", len(tables))
	}
	for _, b := range tables {
		if _, end, _ := eventlog.KeySpan(b[0]); bytes.Compare(b[1], end) >= 0 {
			t.Errorf("a table runs from %q to %q, past its span's end %q", b[0], b[1], end)
		}
	}
}

// A store that an older Pebble format holds (one without blob files) opens: read-only as it
// is, and for writing ratcheted to the newest format, after which its records are separated
// from their keys and read back whole, and the chain verifies.
func TestOpenOlderFormat(t *testing.T) {
	t.Parallel()
	fs := vfs.NewMem()
	db, err := pebble.Open("/data", &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatMinSupported, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("meta/format"), []byte("tether.eventlog.v1"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := eventlog.Open("/data", eventlog.Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of an older format: %v", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	l, err := eventlog.Open("/data", eventlog.Options{FS: fs})
	if err != nil {
		t.Fatalf("open of an older format: %v", err)
	}
	data := []byte(`{"pad":"` + strings.Repeat("x", 400) + `"}`) // past hotLogSeparateMin
	const n = 100
	for i := range n {
		if _, err := l.Append(context.Background(), eventlog.Event{Stream: fmt.Sprintf("job/%03d", i), Type: "job.submitted", Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = pebble.Open("/data", &pebble.Options{FS: fs, ReadOnly: true, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	if v := db.FormatMajorVersion(); v != pebble.FormatNewest {
		t.Errorf("format %s after a writable open, want %s", v, pebble.FormatNewest)
	}
	blobs := 0
	if ls, err := fs.List("/data"); err == nil {
		for _, name := range ls {
			if strings.HasSuffix(name, ".blob") {
				blobs++
			}
		}
	}
	if blobs == 0 {
		t.Errorf("no blob file after a flush of %d records of %d bytes", n, len(data))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	l, err = eventlog.Open("/data", eventlog.Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	head, err := l.Verify(context.Background())
	if err != nil || head.Seq != n {
		t.Fatalf("Verify: %+v, %v; want seq %d", head, err, n)
	}
	r, err := l.Get(n / 2)
	if err != nil || !bytes.Equal(r.Data, data) {
		t.Fatalf("Get(%d): %v, data %d bytes; want %d", n/2, err, len(r.Data), len(data))
	}
}

// quietPebble keeps the Pebble stores a test opens itself from logging.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)           {}
func (quietPebble) Errorf(string, ...any)          {}
func (quietPebble) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
