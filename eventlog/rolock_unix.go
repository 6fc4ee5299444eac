//go:build unix

package eventlog

import (
	"errors"
	"io"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// readOnlyLockFS is the file system of a read-only open (tether replay) on a data dir whose
// file system is mounted read-only (a backup, a snapshot): Pebble's lock creates its LOCK file
// and takes a write lock, which such a mount refuses, so the lock is taken for reading on the
// LOCK file a server left. A server that writes the same store through another mount holds
// its write lock, which a read lock still conflicts with, so the open is refused as before.
// The LOCK file is read from the operating system's file system: under another (a test's
// memory) there is none to read, and the file system's own answer stands.
type readOnlyLockFS struct{ vfs.FS }

func (fs readOnlyLockFS) Lock(name string) (io.Closer, error) {
	c, err := fs.FS.Lock(name)
	if !errors.Is(err, syscall.EROFS) {
		return c, err
	}
	f, ferr := os.Open(name)
	if ferr != nil {
		return nil, err
	}
	spec := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
	if ferr := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &spec); ferr != nil {
		_ = f.Close()
		return nil, ferr
	}
	return f, nil
}
