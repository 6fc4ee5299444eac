//go:build unix

package eventlog

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// readOnlyMount is the default file system as a read-only mount answers a lock: Pebble's lock
// creates its LOCK file, which such a mount refuses.
type readOnlyMount struct{ vfs.FS }

func (readOnlyMount) Lock(name string) (io.Closer, error) {
	return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EROFS}
}

// A read-only open of a data dir on a read-only mount (tether replay on a backup) takes a read
// lock on the LOCK file a server left, rather than fail to create it; a dir with no LOCK file
// is refused as before.
func TestReadOnlyOpenLocksAReadOnlyMount(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, "LOCK")
	fs := readOnlyLockFS{FS: readOnlyMount{vfs.Default}}
	if _, err := fs.Lock(lock); err == nil {
		t.Fatal("a lock with no LOCK file to read was taken")
	}
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := fs.Lock(lock)
	if err != nil {
		t.Fatalf("the read lock on a read-only mount: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// tether replay's open of a data dir a server left, on a read-only mount, reads it.
func TestReadOnlyOpenOfAReadOnlyMount(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(context.Background(), Event{Stream: "job/1", Type: "job.submitted", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(dir, Options{ReadOnly: true, FS: readOnlyMount{vfs.Default}})
	if err != nil {
		t.Fatalf("a read-only open on a read-only mount: %v", err)
	}
	defer ro.Close()
	if head := ro.Head(); head.Seq != 1 {
		t.Fatalf("head %+v, want the record the server wrote", head)
	}
}
