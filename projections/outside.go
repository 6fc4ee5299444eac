package projections

import (
	"fmt"
	"slices"
	"time"
)

// Reads of the table outside the lock.
//
// A server's Set is guarded by a lock that every commit takes to fold its events, and reading
// the table is reading the disk: a list whose filters leave out most of what its index holds
// reads a job from disk for each entry it skips. Under that lock every acknowledgement would
// wait for it. So the reads a client makes (ListOutside, JobOutside, PeekOutside, GoneOutside)
// read the table with no lock held, and take the lock (locked) only for the memory side and to
// see which of the stored jobs they read memory masks, as many short times as they need. Their
// answer is the Set's at the last of those times, what List and Job would have answered then,
// if:
//
//  1. no flush ends during the call: the caller holds off every EndFlush (the runtime's table
//     lock does). A flush's table writes may land meanwhile: they change only the stored copies
//     of jobs that memory masks until its EndFlush, so a stored job that memory does not mask at
//     the last look is the job as it is then, and the same in every read of the call;
//  2. locked runs its argument with the Set under the lock that guards it, which may change in
//     between by Apply alone.

// Locked runs fn with the Set under the lock that guards it, for reading.
type Locked func(fn func(*Set))

// JobOutside is Job with the table read outside the lock (see above).
func JobOutside(locked Locked, id string) (*Job, bool) {
	var out *Job
	PeekOutside(locked, id, func(j *Job) { out = j.Clone() })
	return out, out != nil
}

// PeekOutside calls fn with a job, if there is one, without copying it: memory's own under the
// lock, or one read from the table outside it (see above). fn must neither keep nor change it.
func PeekOutside(locked Locked, id string, fn func(*Job)) bool {
	var store Store
	found := false
	locked(func(s *Set) {
		switch j := s.jobs[id]; {
		case j != nil:
			fn(j)
			found = true
		case !s.masked(id):
			store = s.store
		}
	})
	if store != nil {
		if j := readStored(store, id); j != nil {
			fn(j)
			found = true
		}
	}
	return found
}

// GoneOutside is Gone with the table read outside the lock (see above): a tombstone, once
// written, stays, so one the table holds was there at the look under the lock, or the job
// expired since.
func GoneOutside(locked Locked, id string) (tenant string, ok bool) {
	var store Store
	locked(func(s *Set) {
		switch t, gone := s.gone[id]; {
		case gone:
			tenant, ok = t.tenant, true
		case s.jobs[id] == nil:
			store = s.store
		}
	})
	if store == nil {
		return tenant, ok
	}
	v, found := store.Get([]byte(string(keyGone) + id))
	if !found {
		return "", false
	}
	t, ok := tombstoneOf(v)
	return t.tenant, ok
}

// readStored reads a finished job from the table, or nil.
func readStored(store Store, id string) *Job {
	v, ok := store.Get([]byte(string(keyJob) + id))
	if !ok {
		return nil
	}
	j, err := decodeJob(v)
	if err != nil {
		panic(fmt.Sprintf("projections: stored job %s: %v", id, err)) // only a Flush writes it
	}
	return j
}

// ListOutside is List with the table read outside the lock (see above). It reads each index's
// table side a part at a time, as far as the page needs, then looks again under the lock: the
// entries of memory and the unmasked ones read so far, merged, are the index's first limit+1
// once there are that many before the first entry not yet read, or none is left to read.
func ListOutside(locked Locked, f JobFilter, now time.Time) ([]*Job, bool) {
	q := newListQuery(f, now)
	sides := make([]tableSide, len(q.indexes))
	for i, x := range q.indexes {
		sides[i] = tableSide{x: x, next: f.After}
	}
	for {
		var store Store
		var page []*Job
		var more, done bool
		locked(func(s *Set) {
			store = s.store
			page, more, done = s.listMerged(&q, sides)
		})
		if done {
			return page, more
		}
		for i := range sides {
			sides[i].read(store, &q)
		}
	}
}

// tableSide is what a ListOutside read of one index's table: its entries from the cursor up to
// next, whose jobs match the query.
type tableSide struct {
	x index
	// jobs are the stored jobs of the entries read that match the query, in scan order, masked
	// or not: the lock says which are memory's.
	jobs []*Job
	// next is the first entry not read yet, once started; end says none is left.
	next         string
	started, end bool
	// want is how many more matching jobs the next read looks for, and bound, if set, the
	// entry past which it stops: memory's limit+1-th, beyond which none can be on the page.
	want  int
	bound string
}

// listMerged looks, under the lock, at what the sides read: it returns the page if every index
// has its first limit+1 entries among them or in memory, else tells the sides what to read next.
func (s *Set) listMerged(q *listQuery, sides []tableSide) (page []*Job, more, done bool) {
	if s.unindexed {
		panic("projections: a list of a Set that keeps no index")
	}
	reverse := q.f.Newest
	found := map[string]*Job{}
	var ids []string
	done = true
	for i := range sides {
		side := &sides[i]
		if s.store == nil {
			side.end = true
		}
		// Memory's part is walked, under the lock, in the smallest of the indexes a job of the
		// side is in: a filter that leaves out most of memory's jobs costs the few it keeps.
		walk := side.x
		for _, o := range q.otherIndexes(side.x) {
			if s.index.len(o) < s.index.len(walk) {
				walk = o
			}
		}
		var merged []string
		s.index.scan(walk, q.f.After, reverse, func(id string) bool {
			if j := s.jobs[id]; j != nil && q.matches(j) && (walk == side.x || s.index.has(side.x, id)) {
				merged, found[id] = append(merged, id), j
			}
			return len(merged) <= q.limit
		})
		memFull := len(merged) > q.limit
		bound := ""
		if memFull {
			bound = merged[q.limit]
		}
		for _, j := range side.jobs {
			if !s.masked(j.ID) {
				merged, found[j.ID] = append(merged, j.ID), j
			}
		}
		slices.Sort(merged)
		if reverse {
			slices.Reverse(merged)
		}
		switch { // memory's entries past next may come after table entries not read yet
		case side.end:
		case side.started:
			merged = merged[:countBefore(merged, side.next, reverse)]
		default:
			merged = nil
		}
		if len(merged) > q.limit || side.end {
			ids = append(ids, merged[:min(len(merged), q.limit+1)]...)
			side.want = 0
			continue
		}
		done = false
		side.want, side.bound = q.limit+1-len(merged), bound
	}
	if !done {
		return nil, false, false
	}
	page, more = s.page(q, ids, found)
	return page, more, true
}

// countBefore is how many of entries, sorted in scan order, come before next in that order.
func countBefore(entries []string, next string, reverse bool) int {
	n, _ := slices.BinarySearchFunc(entries, next, func(e, next string) int {
		if (e < next) != reverse && e != next {
			return -1
		}
		return 1
	})
	return n
}

// read reads the side's table from next on, with no lock held, until it found want more jobs
// that match, passed its bound or ran out; it stops on an entry it does not read, the next.
// An entry of the side's index is a candidate only if the index of each other filter holds it
// too: the indexes are walked together (a zig-zag join, each skipping to the next entry the
// others have), so a filter that leaves out most of the history costs the entries the indexes
// share, not a read of every job.
func (t *tableSide) read(store Store, q *listQuery) {
	if t.end || t.want == 0 {
		return
	}
	reverse := q.f.Newest
	prefix := t.x.appendPrefix(nil)
	var others []*window
	for _, o := range q.otherIndexes(t.x) {
		others = append(others, &window{prefix: o.appendPrefix(nil), reverse: reverse})
	}
	at, skipAt := t.next, false // where the walk goes on from; skipAt: not at itself
	found := 0
	for done := false; !done; {
		var start []byte
		if at != "" {
			start = append(slices.Clip(prefix), at...)
		}
		jump := ""
		store.Scan(prefix, start, reverse, func(key, _ []byte) bool {
			id := string(key[len(prefix):])
			if skipAt && id == at {
				return true
			}
			if found == t.want || (t.bound != "" && id != t.bound && (id > t.bound) != reverse) {
				t.next, done = id, true
				return false
			}
			for _, other := range others {
				next, ok := other.first(store, id)
				if !ok { // no entry from here on is in that index, so none matches
					t.end, done = true, true
					return false
				}
				if next != id {
					jump = next
					return false
				}
			}
			if j := readStored(store, id); j != nil && q.matches(j) {
				t.jobs = append(t.jobs, j)
				found++
			}
			at, skipAt = id, true
			return true
		})
		switch {
		case done:
		case jump != "":
			at, skipAt = jump, false
		default:
			t.end, done = true, true
		}
	}
	t.started = true
}

// window is a run of an index's entries in scan order, read ahead a part at a time, so that a
// walk that asks for the entry at or after each of many candidates in turn costs one read of the
// index a part, not a seek a candidate (which decompresses a block of the table each time).
type window struct {
	prefix  []byte
	reverse bool
	ahead   []string // the entries read from where the last part began, less those passed
	end     bool     // ahead holds every entry from there on
}

// windowPart is how many entries a window reads at once.
const windowPart = 64

// first is the index's first entry at or after entry in scan order, if there is one. The entries
// asked for must not go back in scan order.
func (w *window) first(store Store, entry string) (string, bool) {
	for len(w.ahead) > 0 && w.ahead[0] != entry && (w.ahead[0] < entry) != w.reverse {
		w.ahead = w.ahead[1:]
	}
	if len(w.ahead) > 0 {
		return w.ahead[0], true
	}
	if w.end {
		return "", false
	}
	w.ahead = w.ahead[:0]
	store.Scan(w.prefix, append(slices.Clip(w.prefix), entry...), w.reverse, func(key, _ []byte) bool {
		w.ahead = append(w.ahead, string(key[len(w.prefix):]))
		return len(w.ahead) < windowPart
	})
	w.end = len(w.ahead) < windowPart
	if len(w.ahead) == 0 {
		return "", false
	}
	return w.ahead[0], true
}
