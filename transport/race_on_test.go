//go:build race

package transport

// raceEnabled: the race detector changes what allocates (sync.Pool drops items at random
// under it), so allocation guards do not hold there.
const raceEnabled = true
