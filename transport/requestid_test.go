package transport

import (
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The ids cut from blocks stay what they were when made, across blocks and from concurrent
// requests: prefix, then the counter, each once, and none with room to append into a
// neighbour's value.
func TestRequestIDsFromBlocks(t *testing.T) {
	ids := newRequestIDs()
	const workers, each = 4, 3 * idBlock
	got := make([][][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				got[w] = append(got[w], ids.next())
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, vs := range got {
		for _, v := range vs {
			if len(v) != 1 || cap(v) != 1 || !strings.HasPrefix(v[0], ids.prefix) {
				t.Fatalf("id values %q (cap %d), want one id after %q", v, cap(v), ids.prefix)
			}
			n, err := strconv.ParseUint(strings.TrimPrefix(v[0], ids.prefix), 10, 64)
			if err != nil || n == 0 || n > workers*each || seen[v[0]] {
				t.Fatalf("id %q: counter %d, %v, seen before %v", v[0], n, err, seen[v[0]])
			}
			seen[v[0]] = true
		}
	}
}
