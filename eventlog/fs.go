package eventlog

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// countingFS wraps a vfs.FS so that every file it hands out reports its syncs to the log's
// stats, so the log can report what group commit achieves (events per fsync) and what fsyncs
// cost.
type countingFS struct {
	vfs.FS
	stats *logStats
}

func (fs countingFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return countingFile{File: f, stats: fs.stats}, nil
}

func (fs countingFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, cat))
}

func (fs countingFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.Open(name, opts...))
}

func (fs countingFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, cat, opts...))
}

func (fs countingFS) OpenDir(name string) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenDir(name))
}

func (fs countingFS) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, cat))
}

// Unwrap lets Pebble see through the wrapper where it looks for the underlying FS.
func (fs countingFS) Unwrap() vfs.FS { return fs.FS }

type countingFile struct {
	vfs.File
	stats *logStats
}

func (f countingFile) Sync() error {
	defer f.stats.observeSync(time.Now())
	return f.File.Sync()
}

func (f countingFile) SyncData() error {
	defer f.stats.observeSync(time.Now())
	return f.File.SyncData()
}

func (f countingFile) SyncTo(length int64) (bool, error) {
	defer f.stats.observeSync(time.Now())
	return f.File.SyncTo(length)
}

// pebbleLogger sends Pebble's log lines to zap. Its Fatalf panics instead of exiting: Pebble
// calls Fatalf when a commit fails after a WAL write or sync error, and Log.guard recovers the
// panic into a failed log. A Fatalf on one of Pebble's own goroutines (a failed MANIFEST sync,
// say) is not recovered and ends the process: a storage failure stops the server.
type pebbleLogger struct{ log *zap.SugaredLogger }

func (l pebbleLogger) Infof(format string, args ...any) { l.log.Debugf(format, args...) }
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Errorw(fmt.Sprintf(format, args...), "code", "STORAGE_ERROR")
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Errorw(msg, "code", "STORAGE_FATAL")
	panic(errors.New("pebble: " + msg))
}
