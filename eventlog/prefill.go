package eventlog

import (
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Why the WAL is prefilled: an fdatasync after an append must also write the inode, because
// the file's size changed, and on ext4 that is a second device write per sync. Measured on the
// development VM (4 KiB writes, fdatasync each): 0.27 ms and 147 µs of CPU when appending,
// 0.17 ms and 98 µs when overwriting. Every commit waits for one such sync, so the overwrite
// is what group commit should pay. Pebble gets it by recycling old WAL files, but only once a
// memtable has been flushed; a young store appends to every WAL it has. prefillFS keeps a
// zeroed, synced region written ahead of the WAL writer, so its syncs carry data only.
//
// Zeros past the last record are what Pebble expects of a preallocated or recycled WAL: its
// reader looks ahead past a zeroed chunk, finds no later record, and reports an unclean end,
// which recovery accepts for the newest WAL. Older WALs end with the EOF trailer Pebble writes
// when it rotates, before any zeros.

// prefillFS hands out prefilled files for the WALs that Pebble creates or recycles.
type prefillFS struct {
	vfs.FS
	chunk int64 // most bytes zeroed per fill
}

// firstFill is the first fill's size; each fill doubles it up to the chunk. Pebble starts with
// small memtables and rotates its first WALs after a few hundred KiB, which a full chunk of
// zeros each would outweigh.
const firstFill = 512 << 10

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

func (fs prefillFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil || !isWAL(name) {
		return f, err
	}
	return newPrefillFile(f, 0, fs.chunk), nil
}

func (fs prefillFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, cat)
	if err != nil || !isWAL(newname) {
		return f, err
	}
	// A recycled WAL is already written up to its size; fill from there when the writer nears it.
	st, err := f.Stat()
	if err != nil {
		return f, nil
	}
	return newPrefillFile(f, st.Size(), fs.chunk), nil
}

// Unwrap lets Pebble see through the wrapper where it looks for the underlying FS.
func (fs prefillFS) Unwrap() vfs.FS { return fs.FS }

// prefillFile turns the WAL writer's sequential writes into positioned writes and keeps a
// synced run of zeros ahead of them. Pebble writes a WAL from one goroutine; the fill runs on
// another, and mu keeps the two off each other's bytes.
type prefillFile struct {
	vfs.File
	chunk int64 // most bytes zeroed per fill
	off   int64 // where the next write lands; only the writer touches it
	size  int64 // the next fill's size

	mu     sync.Mutex
	idle   *sync.Cond // signalled when a fill ends
	filled int64      // [0, filled) holds data or synced zeros: a write below it keeps the size
	// filling says a fill starting at fillFrom is under way; the writer may not pass fillFrom
	// until it ends.
	filling  bool
	fillFrom int64
	failed   bool // a fill failed: stop filling, the writer appends as it would without us
}

func newPrefillFile(f vfs.File, filled, chunk int64) *prefillFile {
	p := &prefillFile{File: f, chunk: chunk, size: min(firstFill, chunk), filled: filled}
	p.idle = sync.NewCond(&p.mu)
	return p
}

func (f *prefillFile) Write(b []byte) (int, error) {
	end := f.off + int64(len(b))
	f.mu.Lock()
	for f.filling && end > f.fillFrom {
		// The writer caught up with a fill: zeros must not land on its data.
		f.idle.Wait()
	}
	if !f.filling && !f.failed && f.filled-end < f.size/2 {
		f.filling = true
		f.fillFrom = max(f.filled, end)
		go f.fill(f.fillFrom, f.size)
		f.size = min(2*f.size, f.chunk)
	}
	f.mu.Unlock()
	n, err := f.File.WriteAt(b, f.off)
	f.off += int64(n)
	return n, err
}

// fill writes and syncs n zero bytes at from.
func (f *prefillFile) fill(from, n int64) {
	// A buffer of its own: a vfs.File may scribble on what it is given (MemFS does, in tests).
	zeros := make([]byte, min(n, 256<<10))
	var err error
	for at := from; at < from+n && err == nil; at += int64(len(zeros)) {
		clear(zeros)
		_, err = f.File.WriteAt(zeros[:min(int64(len(zeros)), from+n-at)], at)
	}
	if err == nil {
		err = f.File.SyncData()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.filling = false
	if err != nil {
		f.failed = true // the writer's own writes and syncs will meet the disk's trouble
	} else {
		f.filled = from + n
	}
	f.idle.Broadcast()
}

// Close waits for a fill under way, so no write lands after the file is closed.
func (f *prefillFile) Close() error {
	f.mu.Lock()
	for f.filling {
		f.idle.Wait()
	}
	f.mu.Unlock()
	return f.File.Close()
}
