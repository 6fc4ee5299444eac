//go:build !unix

package eventlog

import "github.com/cockroachdb/pebble/v2/vfs"

// readOnlyLockFS locks as the file system does here (rolock_unix.go says why it differs there).
type readOnlyLockFS struct{ vfs.FS }
