package eventlog

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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
//
// Its error lines are bounded: Pebble retries a flush or a compaction that failed over and
// over, and logs every try (a full disk made 93 lines a second); at most one line a second
// goes out, and the next says how many it stands for. None carries a stack trace, which would
// show Pebble's goroutine and not the cause.
type pebbleLogger struct {
	log   *zap.SugaredLogger
	limit *lineLimit
}

func newPebbleLogger(log *zap.Logger, clock func() time.Time) pebbleLogger {
	return pebbleLogger{log: log.WithOptions(zap.AddStacktrace(zapcore.FatalLevel)).Sugar(), limit: &lineLimit{clock: clock}}
}

func (l pebbleLogger) Infof(format string, args ...any) { l.log.Debugf(format, args...) }
func (l pebbleLogger) Errorf(format string, args ...any) {
	if ok, dropped := l.limit.allow(); ok {
		l.log.Errorw(fmt.Sprintf(format, args...), "code", "STORAGE_ERROR", "errors_not_logged", dropped)
	}
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Errorw(msg, "code", "STORAGE_FATAL")
	panic(errors.New("pebble: " + msg))
}

// lineLimit lets one line a second through, and counts the others.
type lineLimit struct {
	clock   func() time.Time
	mu      sync.Mutex
	next    time.Time
	dropped int
}

// allow reports whether a line may go out now, and how many did not since the last that did.
func (l *lineLimit) allow() (ok bool, dropped int) {
	now := l.clock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.dropped++
		return false, 0
	}
	l.next, dropped, l.dropped = now.Add(time.Second), l.dropped, 0
	return true, dropped
}
