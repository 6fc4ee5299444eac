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
	eventlogtest.Run(t, func(*testing.T) eventlogtest.Store { return crashableStore() })
}

func crashableStore() eventlogtest.Store { return eventlogtest.CrashableMem() }
