//go:build !unix

package proc

import "time"

func cpu() (time.Duration, bool) { return 0, false }
