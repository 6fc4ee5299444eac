package eventlog_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

// refusing makes the operations of kind on files whose path ends with suffix fail with errno,
// as the OS says it (a path error), once it is on.
func refusing(suffix string, errno syscall.Errno, kinds ...errorfs.OpKind) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, suffix) {
			return nil
		}
		for _, k := range kinds {
			if op.Kind == k {
				return &fs.PathError{Op: "write", Path: op.Path, Err: errno}
			}
		}
		return nil
	})}
}

// faults records what OnStorageFault is told.
type faults struct {
	mu   sync.Mutex
	seen []*eventlog.StorageFault
}

func (f *faults) note(sf *eventlog.StorageFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, sf)
}

func (f *faults) first(t *testing.T) *eventlog.StorageFault {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		t.Fatal("OnStorageFault was not told of the fault")
	}
	return f.seen[0]
}

// A write the disk refuses for good (full, read-only) is told to OnStorageFault before Pebble
// hears of it, naming the file and the cause; a refusal that is no storage fault is not.
func TestStorageFaultIsToldFirst(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		code  string
	}{
		{syscall.ENOSPC, "STORAGE_FULL"}, {syscall.EROFS, "STORAGE_READ_ONLY"}, {syscall.EACCES, "STORAGE_READ_ONLY"}, {syscall.EIO, "STORAGE_IO_ERROR"},
	} {
		t.Run(tc.code+"/"+tc.errno.Error(), func(t *testing.T) {
			fault := refusing(".log", tc.errno, errorfs.OpFileWrite, errorfs.OpFileWriteAt)
			var told faults
			l, err := eventlog.Open("/data/log", eventlog.Options{FS: errorfs.Wrap(vfs.NewMem(), fault), OnStorageFault: told.note})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if _, err := l.Append(context.Background(), eventlogtest.Event("job/a", 1)); err != nil {
				t.Fatal(err)
			}
			fault.On()
			if _, err := l.Append(context.Background(), eventlogtest.Event("job/a", 2)); !errors.Is(err, eventlog.ErrFailed) {
				t.Fatalf("an append the disk refused: %v, want ErrFailed", err)
			}
			f := told.first(t)
			if f.Code() != tc.code || f.Errno != tc.errno || !strings.HasPrefix(f.Path, "/data/log/") || !strings.HasSuffix(f.Path, ".log") {
				t.Fatalf("told %+v (%s), want %s on a WAL in /data/log", f, f.Code(), tc.code)
			}
		})
	}
	t.Run("not a fault", func(t *testing.T) {
		fault := walFault(errorfs.OpFileWrite, errorfs.OpFileWriteAt) // errorfs.ErrInjected: no errno
		var told faults
		l, err := eventlog.Open("/data/log", eventlog.Options{FS: errorfs.Wrap(vfs.NewMem(), fault), OnStorageFault: told.note})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		fault.On()
		if _, err := l.Append(context.Background(), eventlogtest.Event("job/a", 1)); !errors.Is(err, eventlog.ErrFailed) {
			t.Fatalf("an append that failed: %v, want ErrFailed", err)
		}
		if len(told.seen) != 0 {
			t.Fatalf("told of %v, which is no storage fault", told.seen[0])
		}
	})
}

// A store whose lock file cannot be opened because the file system is read-only is a storage
// fault, named so, not a log "in use by another process".
func TestReadOnlyStoreIsNotInUse(t *testing.T) {
	mem := vfs.NewMem()
	l, err := eventlog.Open("/data/log", eventlog.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fault := refusing("LOCK", syscall.EROFS, errorfs.OpLock)
	fault.On()
	_, err = eventlog.Open("/data/log", eventlog.Options{FS: errorfs.Wrap(mem, fault)})
	f, ok := eventlog.AsStorageFault(err)
	if errors.Is(err, eventlog.ErrInUse) || !ok || f.Errno != syscall.EROFS || f.Path != "/data/log/LOCK" {
		t.Fatalf("open on a read-only file system: %v, want a StorageFault naming /data/log/LOCK and EROFS", err)
	}
}
