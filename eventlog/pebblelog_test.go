package eventlog

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Pebble logs every retry of a flush or compaction that failed (a full disk made 93 lines a
// second, with stack traces): at most one line a second goes out, saying how many it stands
// for, and none carries a stack trace.
func TestPebbleErrorsAreBounded(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	l := newPebbleLogger(zap.New(core, zap.AddStacktrace(zapcore.ErrorLevel)), func() time.Time { return now })
	for range 93 {
		l.Errorf("background error: %s", "no space left on device")
		now = now.Add(10 * time.Millisecond)
	}
	now = now.Add(time.Second)
	l.Errorf("background error: %s", "no space left on device")
	got := logs.All()
	if len(got) != 2 {
		t.Fatalf("%d lines for 94 errors in 2 s, want 2", len(got))
	}
	if n := got[1].ContextMap()["errors_not_logged"]; n != int64(92) {
		t.Fatalf("the second line stands for %v errors not logged, want 92", n)
	}
	for _, e := range got {
		if e.Stack != "" {
			t.Fatalf("a line with a stack trace: %s", e.Stack)
		}
	}
}
