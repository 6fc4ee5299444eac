package eventlog_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tetherhq/tether/eventlog/eventlogtest"
)

func TestConformanceDisk(t *testing.T) {
	t.Parallel()
	eventlogtest.Run(t, func(t *testing.T) eventlogtest.Store {
		return eventlogtest.Store{FS: vfs.Default, Dir: t.TempDir() + "/log"}
	})
}

func TestConformanceCrashableMem(t *testing.T) {
	t.Parallel()
	eventlogtest.Run(t, func(*testing.T) eventlogtest.Store { return eventlogtest.CrashableMem() })
}

// TestConformancePrefilledWAL runs the suite with fills of 4 KiB, so that the WAL writer waits
// for a fill, passes it and starts the next one many times in every test.
func TestConformancePrefilledWAL(t *testing.T) {
	t.Parallel()
	eventlogtest.Run(t, func(*testing.T) eventlogtest.Store { return eventlogtest.CrashableMemPrefilled(4 << 10) })
}

// TestConformanceUpstream runs the suite on a copy of an upstream in memory: every log leads
// the upstream, and a crash keeps the upstream whole while the local copy loses its unsynced
// writes.
func TestConformanceUpstream(t *testing.T) {
	t.Parallel()
	eventlogtest.Run(t, func(*testing.T) eventlogtest.Store { return eventlogtest.MemUpstream() })
}
