package sim

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// disk is the errorfs injector on one incarnation of the server's filesystem. The simulator
// arms it from its own goroutine; Pebble's goroutines consult it before each operation.
//
// It does two things. It fails the next WAL write or sync (a disk error), and it holds the next
// WAL sync until released: a commit's records are then written but not synced, which is the
// moment a crash loses or keeps part of them. Pebble writes a commit's WAL record before it
// syncs it, so when the held sync arrives the whole record is in the file, in every run alike.
type disk struct {
	mu sync.Mutex
	// archiveFailIn, when not negative, is how many more operations on the archive directory
	// succeed before one fails (a full disk, an I/O error).
	archiveFailIn int
	failOp        string // "write" or "sync": the next such WAL operation fails
	// saveCrashIn, when not negative, is how many more operations on a checkpoint's tables
	// succeed before the machine stops (saveCrash, what its disk then holds, unsynced writes
	// lost) and the operation fails: a crash in the middle of a checkpoint's save.
	saveCrashIn int
	saveMem     *vfs.MemFS
	saveCrash   *vfs.MemFS
	hold        bool
	arrived     chan struct{}
	release     chan struct{}
}

// MaybeError implements errorfs.Injector.
func (d *disk) MaybeError(op errorfs.Op) error {
	if strings.HasPrefix(op.Path, archiveDir) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.archiveFailIn == 0 {
			d.archiveFailIn = -1
			return errorfs.ErrInjected
		}
		if d.archiveFailIn > 0 {
			d.archiveFailIn--
		}
		return nil
	}
	if strings.Contains(op.Path, "checkpoint-ingest-") {
		// Only the goroutine that saves a checkpoint touches its tables, so the operation the
		// crash lands on is the same in every run.
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.saveCrashIn == 0 {
			d.saveCrashIn, d.saveCrash = -1, d.saveMem.CrashClone(vfs.CrashCloneCfg{})
			return errorfs.ErrInjected
		}
		if d.saveCrashIn > 0 {
			d.saveCrashIn--
		}
		return nil
	}
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	var kind string
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
		kind = "write"
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		kind = "sync"
	default:
		return nil
	}
	d.mu.Lock()
	if d.failOp == kind && !closingWAL() {
		d.failOp = ""
		d.mu.Unlock()
		return errorfs.ErrInjected
	}
	if kind == "sync" && d.hold {
		d.hold = false
		arrived, release := d.arrived, d.release
		d.mu.Unlock()
		close(arrived)
		<-release
		return nil
	}
	d.mu.Unlock()
	return nil
}

// closingWAL reports whether the calling goroutine is closing a WAL at its rotation. Pebble
// panics when that fails, after it has released its mutex, and the mutex's deferred unlock then
// kills the process with a fatal error that no recover catches: a real server would die of it
// too, with nothing acknowledged lost, but the simulator could not go on. So an armed fault waits
// for the next commit's write or sync instead, which fails the log as a disk error should.
func closingWAL() bool {
	buf := make([]byte, 16<<10)
	return bytes.Contains(buf[:runtime.Stack(buf, false)], []byte("pebble/v2.(*DB).rotateWAL"))
}

// String implements errorfs.Injector.
func (d *disk) String() string { return "sim disk" }

// failArchiveIn makes the archive directory's operation n from now fail; -1 disarms it.
func (d *disk) failArchiveIn(n int) {
	d.mu.Lock()
	d.archiveFailIn = n
	d.mu.Unlock()
}

// crashInSave arms a crash at the nth operation on a checkpoint's tables from now, the disk
// being mem; savedCrash disarms it and returns the disk as the crash left it (nil: the save
// had fewer operations, and ended).
func (d *disk) crashInSave(mem *vfs.MemFS, n int) {
	d.mu.Lock()
	d.saveCrashIn, d.saveMem, d.saveCrash = n, mem, nil
	d.mu.Unlock()
}

func (d *disk) savedCrash() *vfs.MemFS {
	d.mu.Lock()
	defer d.mu.Unlock()
	crashed := d.saveCrash
	d.saveCrashIn, d.saveMem, d.saveCrash = -1, nil, nil
	return crashed
}

// failNext makes the next WAL operation of the kind fail.
func (d *disk) failNext(kind string) {
	d.mu.Lock()
	d.failOp = kind
	d.mu.Unlock()
}

// holdNextSync holds the next WAL sync; the returned channel is closed when it arrives.
func (d *disk) holdNextSync() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hold, d.arrived, d.release = true, make(chan struct{}), make(chan struct{})
	return d.arrived
}

// releaseSync lets a held sync go on (to a filesystem the simulator has already crashed).
func (d *disk) releaseSync() {
	d.mu.Lock()
	release := d.release
	d.release = nil
	d.mu.Unlock()
	if release != nil {
		close(release)
	}
}

// waitArrived waits for a held sync; a run that never gets one is a broken assumption about
// Pebble, not a flaky test.
func waitArrived(arrived <-chan struct{}) {
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		panic("sim: a commit's WAL sync never came")
	}
}

// crashClone returns the filesystem as a power cut would leave it: everything synced, and of
// the WAL's unsynced 4 KiB blocks each with probability keepPercent. It is vfs.MemFS.CrashClone
// made reproducible: CrashClone draws its random numbers while it ranges over Go maps, so the
// same RNG does not give the same clone twice. Here the synced state and the full state come
// from CrashClone without randomness, and the WAL's unsynced blocks are drawn here, files in
// name order. Only WAL files get unsynced data: the log's durability is decided there; the
// tables and MANIFEST are synced by Pebble before anything depends on them.
func crashClone(mem *vfs.MemFS, dir string, keepPercent int, rng *rand.Rand) (*vfs.MemFS, error) {
	synced := mem.CrashClone(vfs.CrashCloneCfg{})
	// At 100 % every draw keeps the data, so the order of the draws does not matter.
	full := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(0, 0))})
	names, err := full.List(dir)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		path := full.PathJoin(dir, name)
		after, err := readAll(full, path)
		if err != nil {
			return nil, err
		}
		before, err := readAll(synced, path)
		exists := err == nil
		if !exists {
			// Created and never made durable in its directory: its name survives or not.
			if keepPercent == 0 || rng.IntN(100) >= keepPercent {
				continue
			}
		}
		const block = 4096
		var f vfs.File
		for off := 0; off < len(after); off += block {
			end := min(off+block, len(after))
			if end <= len(before) && bytes.Equal(after[off:end], before[off:end]) {
				continue
			}
			if rng.IntN(100) >= keepPercent {
				continue
			}
			if f == nil {
				if exists {
					f, err = synced.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
				} else {
					f, err = synced.Create(path, vfs.WriteCategoryUnspecified)
				}
				if err != nil {
					return nil, err
				}
			}
			if _, err := f.WriteAt(after[off:end], int64(off)); err != nil {
				return nil, err
			}
		}
		if f != nil {
			if err := f.Sync(); err != nil {
				return nil, err
			}
			if err := f.Close(); err != nil {
				return nil, err
			}
		}
	}
	if d, err := synced.OpenDir(dir); err == nil {
		if err := d.Sync(); err != nil {
			return nil, err
		}
		_ = d.Close()
	}
	return synced, nil
}

func readAll(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("sim: reading %s: %w", path, err)
	}
	return b, nil
}
