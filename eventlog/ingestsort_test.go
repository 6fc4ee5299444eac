package eventlog

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"
)

// TestSortIngestKeysIsAStableSort checks the natural merge sort of a checkpoint's keys against
// the library's stable sort, on keys in runs of every length (a key repeated within and across
// runs, whose last write must end up last) and in no order at all.
func TestSortIngestKeysIsAStableSort(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	for round := range 500 {
		n := rng.Intn(300)
		var keys []ingestKey
		for len(keys) < n {
			// A run: ascending keys from a random start, some of them repeated.
			k := rng.Intn(50)
			for range 1 + rng.Intn(1+rng.Intn(80)) {
				keys = append(keys, ingestKey{key: fmt.Appendf(nil, "k%03d", k), value: fmt.Appendf(nil, "%d", len(keys))})
				k += rng.Intn(3)
			}
		}
		if round%10 == 0 {
			rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		}
		want := slices.Clone(keys)
		slices.SortStableFunc(want, func(a, b ingestKey) int { return bytes.Compare(a.key, b.key) })
		var scratch []ingestKey
		got := sortIngestKeys(slices.Clone(keys), &scratch)
		if !slices.EqualFunc(got, want, func(a, b ingestKey) bool {
			return bytes.Equal(a.key, b.key) && bytes.Equal(a.value, b.value)
		}) {
			t.Fatalf("round %d: %d keys sorted as\n%s\nwant\n%s", round, len(keys), ingestKeysText(got), ingestKeysText(want))
		}
	}
}

func ingestKeysText(keys []ingestKey) string {
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s ", k.key, k.value)
	}
	return b.String()
}
