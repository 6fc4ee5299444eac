package projections

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/btree"

	"github.com/tetherhq/tether/eventlog"
)

// The finished jobs' table.
//
// A Set holds in memory every live job (queued, scheduled, leased) and the finished jobs that
// changed since the last flush. Every other finished job is in a Store, the table a server keeps
// on disk beside the log (eventlog.Views), written only by a flush, in the batch that saves the
// checkpoint of the same seq (eventlog.SaveCheckpoint). So memory, checkpoints and start-up cost
// what is live, and a finished job costs a page of disk when it is read.
//
// Keys, in the Store and in memory alike (all integers big-endian; names never hold NUL):
//
//	j <id>                                   the finished job's JSON (Store only)
//	l <tenant> 0 <field> <value> 0 <id>      List's index: field 0 is every job of the tenant,
//	                                         's' its status, 'q' its queue, 'y' its type, 'L' a
//	                                         label as key=value (one key each; values with NUL
//	                                         are not indexed)
//	d <finished: 8> <id>                     succeeded or cancelled, retained by --retain
//	t <until: 8> <id>                        succeeded or cancelled with a result TTL
//	x <tenant> 0 <died: 8> <id>              a dead letter, by tenant (the cap counts per tenant)
//
// Memory keeps the l, d, t and x keys of the jobs it holds in one ordered tree; a query merges it
// with the Store's keys, leaving out a stored key of any job that memory holds or that changed
// since the last flush (dirty): memory's copy, or its absence, wins.
//
// INVARIANT: a job id is in the Store's current answer (not masked) only if it is neither in
// jobs nor in dirty; every job in jobs has exactly its keys in memory.
// INVARIANT: the Store holds exactly the finished jobs of the fold at the last flush's seq that
// were not in memory then, with exactly their keys.

// Store is the table of finished jobs that a Set reads: eventlog.Views on a server. Writes come
// only from a Flush, through the checkpoint.
type Store interface {
	// Get returns the value under key, or false.
	Get(key []byte) ([]byte, bool)
	// Scan calls fn with the keys that start with prefix, from start (included; nil for the
	// first) in order, or in reverse from start downwards, until fn returns false.
	Scan(prefix, start []byte, reverse bool, fn func(key, value []byte) bool)
}

const (
	keyJob  = 'j'
	keyList = 'l'
	keyDone = 'd'
	keyTTL  = 't'
	keyDead = 'x'
)

// The fields of List's index.
const (
	byNothing = 0
	byStatus  = 's'
	byQueue   = 'q'
	byType    = 'y'
	byLabel   = 'L'
)

func listPrefix(tenant string, field byte, value string) string {
	return string(keyList) + tenant + "\x00" + string(field) + value + "\x00"
}

func deadPrefix(tenant string) string { return string(keyDead) + tenant + "\x00" }

func timeKey(t time.Time) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixNano()))
	return string(b[:])
}

func keyTime(s string) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64([]byte(s[:8])))).UTC()
}

// listKeys are the keys under which List finds a job; the status key is the second.
func listKeys(j *Job) []string {
	out := make([]string, 4, 5+len(j.Labels))
	out[0] = listPrefix(j.Tenant, byNothing, "") + j.ID
	out[1] = listPrefix(j.Tenant, byStatus, string(j.Status)) + j.ID
	out[2] = listPrefix(j.Tenant, byQueue, j.Queue) + j.ID
	out[3] = listPrefix(j.Tenant, byType, j.Type) + j.ID
	for _, k := range slices.Sorted(maps.Keys(j.Labels)) { // in one order: a checkpoint's batch is the same every run
		if v := j.Labels[k]; !strings.Contains(v, "\x00") {
			out = append(out, listPrefix(j.Tenant, byLabel, k+"="+v)+j.ID)
		}
	}
	return out
}

// retentionKey orders a finished job by when it is due to leave the views; "" for a live one.
func retentionKey(j *Job) string {
	switch {
	case !j.Status.Terminal():
		return ""
	case j.Status == StatusFailed:
		return deadPrefix(j.Tenant) + timeKey(j.FinishedAt) + j.ID
	case j.ResultTTL > 0:
		return string(keyTTL) + timeKey(j.FinishedAt.Add(j.ResultTTL)) + j.ID
	default:
		return string(keyDone) + timeKey(j.FinishedAt) + j.ID
	}
}

// keys are all of a job's index keys.
func keys(j *Job) []string {
	out := listKeys(j)
	if r := retentionKey(j); r != "" {
		out = append(out, r)
	}
	return out
}

// memKeys is the ordered tree of the index keys of the jobs in memory.
type memKeys struct{ t *btree.BTreeG[string] }

// keysDegree is the tree's degree: nodes of up to 63 keys.
const keysDegree = 32

func newMemKeys() memKeys {
	return memKeys{btree.NewG(keysDegree, func(a, b string) bool { return a < b })}
}

func (m memKeys) add(j *Job) {
	for _, k := range keys(j) {
		m.t.ReplaceOrInsert(k)
	}
}

func (m memKeys) drop(j *Job) {
	for _, k := range keys(j) {
		m.t.Delete(k)
	}
}

// scan calls fn with the part after prefix of each key under prefix, from prefix+start on
// (start included), in order or in reverse, until fn returns false.
func (m memKeys) scan(prefix, start string, reverse bool, fn func(rest string) bool) {
	visit := func(k string) bool {
		if !strings.HasPrefix(k, prefix) {
			return false
		}
		return fn(k[len(prefix):])
	}
	switch {
	case reverse && start != "":
		m.t.DescendLessOrEqual(prefix+start, visit)
	case reverse:
		if end := prefixEnd(prefix); end != "" {
			m.t.DescendLessOrEqual(end, func(k string) bool {
				if k == end {
					return true
				}
				return visit(k)
			})
		} else {
			m.t.Descend(visit)
		}
	default:
		m.t.AscendGreaterOrEqual(prefix+start, visit)
	}
}

func prefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}

// dirtyMark says a job's stored copy, if any, is stale: the job changed at seq since the last
// flush began. stored says the Store holds a copy that the next flush must delete or replace.
type dirtyMark struct {
	seq    uint64
	stored bool
}

// markDirty records that a job changed at the Set's seq.
func (s *Set) markDirty(id string) {
	d := s.dirty[id]
	d.seq = s.seq
	s.dirty[id] = d
}

// masked reports whether the Store's copy of a job must be ignored.
func (s *Set) masked(id string) bool {
	if _, ok := s.jobs[id]; ok {
		return true
	}
	_, ok := s.dirty[id]
	return ok
}

// stored returns the Store's copy of a finished job that memory does not mask, or nil.
func (s *Set) stored(id string) *Job {
	if s.store == nil || s.masked(id) {
		return nil
	}
	v, ok := s.store.Get([]byte(string(keyJob) + id))
	if !ok {
		return nil
	}
	j, err := decodeStored(v)
	if err != nil {
		panic(fmt.Sprintf("projections: stored job %s: %v", id, err)) // only a Flush writes it
	}
	return j
}

func decodeStored(v []byte) (*Job, error) {
	j := &Job{}
	if err := json.Unmarshal(v, j); err != nil {
		return nil, err
	}
	return j, nil
}

// Stored reports whether a job is read from the table: finished, and not in memory.
func (s *Set) Stored(id string) bool {
	if s.store == nil || s.masked(id) {
		return false
	}
	_, ok := s.store.Get([]byte(string(keyJob) + id))
	return ok
}

// lookup returns a job from memory or the Store, or nil; a job from the Store is a fresh copy
// that nothing else holds.
func (s *Set) lookup(id string) *Job {
	if j := s.jobs[id]; j != nil {
		return j
	}
	return s.stored(id)
}

// load brings a stored job into memory so that an event can change it; nil if there is none.
func (s *Set) load(id string) *Job {
	if j := s.jobs[id]; j != nil {
		return j
	}
	j := s.stored(id)
	if j == nil {
		return nil
	}
	s.jobs[id] = j
	s.keys.add(j)
	s.dirty[id] = dirtyMark{seq: s.seq, stored: true}
	if !j.Status.Terminal() {
		panic(fmt.Sprintf("projections: stored job %s is %s", id, j.Status))
	}
	return j
}

// verdict is what a scan does with a key: leave it out, take it, or stop before it.
type verdict int8

const (
	skip verdict = iota
	take
	stop
)

func takeAll(string, int) verdict { return take }

// scanMerged returns the parts after prefix of the keys under prefix, from prefix+start
// (included; "" for the first) in order or in reverse, from memory and the table merged, the
// table's masked jobs left out: up to n that keep takes, keep being told how many its side took
// before. Each side stops at n or at keep's stop, so a scan costs a page and what keep skips.
func (s *Set) scanMerged(prefix, start string, reverse bool, n int, keep func(rest string, taken int) verdict) []string {
	var mem, disk []string
	s.keys.scan(prefix, start, reverse, func(rest string) bool {
		switch keep(rest, len(mem)) {
		case take:
			mem = append(mem, rest)
		case stop:
			return false
		}
		return len(mem) < n
	})
	if s.store != nil && n > 0 {
		var startKey []byte
		if start != "" {
			startKey = []byte(prefix + start)
		}
		s.store.Scan([]byte(prefix), startKey, reverse, func(key, _ []byte) bool {
			rest := string(key[len(prefix):])
			if s.masked(idOf(prefix, rest)) {
				return true
			}
			switch keep(rest, len(disk)) {
			case take:
				disk = append(disk, rest)
			case stop:
				return false
			}
			return len(disk) < n
		})
	}
	out := append(mem, disk...)
	if len(disk) > 0 && len(mem) > 0 {
		slices.Sort(out)
		if reverse {
			slices.Reverse(out)
		}
	}
	return out[:min(n, len(out))]
}

// idOf is the job id in the part after prefix of a key: after the 8-byte time for timed keys.
func idOf(prefix, rest string) string {
	switch prefix[0] {
	case keyDone, keyTTL, keyDead:
		return rest[8:]
	}
	return rest
}

// Flush is a checkpoint in the making: the Set's live state at Seq, and the changes to the
// finished jobs' table since the last flush. BeginFlush takes it under the lock that guards the
// Set, in time proportional to the live jobs and to what changed; Encode turns it into bytes
// off that lock, while the Set goes on; EndFlush, once the checkpoint is saved, lets the Set
// drop from memory what the Store now holds.
type Flush struct {
	seq  uint64
	live *Set            // nil for a Spill, which keeps no checkpoint
	put  []*Job          // finished jobs to store (copies)
	drop map[string]bool // jobs whose stored copy goes, or is replaced: stored → true
}

// Seq is the seq the flush covers.
func (f *Flush) Seq() uint64 { return f.seq }

// BeginFlush starts a checkpoint of the Set at its seq.
func (s *Set) BeginFlush() *Flush {
	f := s.changes()
	f.live = s.cloneLive()
	return f
}

// Unflushed is how many jobs changed since the last flush: the finished ones among them are
// what memory holds beyond the live jobs.
func (s *Set) Unflushed() int { return len(s.dirty) }

// Spill moves the finished jobs that changed since the last flush to the Set's Store at once,
// apply writing the changes, and keeps no checkpoint: how a fold that is no server's (`tether
// replay`) keeps its memory to what is live.
func (s *Set) Spill(apply func([]eventlog.ViewWrite) error) error {
	f := s.changes()
	writes, err := f.tableWrites(s.store)
	if err != nil {
		return err
	}
	if err := apply(writes); err != nil {
		return err
	}
	s.EndFlush(f)
	return nil
}

// changes is a Flush of what changed since the last one, without the live state.
func (s *Set) changes() *Flush {
	f := &Flush{seq: s.seq, drop: make(map[string]bool, len(s.dirty))}
	for id, d := range s.dirty {
		if j := s.jobs[id]; j != nil && j.Status.Terminal() {
			f.put = append(f.put, j.Clone())
		}
		f.drop[id] = d.stored
	}
	slices.SortFunc(f.put, func(a, b *Job) int { return strings.Compare(a.ID, b.ID) })
	return f
}

// Encode returns the checkpoint's bytes and the writes to the table that go with them. It reads
// the Store (the stored copies it replaces) and not the Set.
func (f *Flush) Encode(store Store) ([]byte, []eventlog.ViewWrite, error) {
	data, err := f.live.MarshalCheckpoint()
	if err != nil {
		return nil, nil, err
	}
	writes, err := f.tableWrites(store)
	return data, writes, err
}

// tableWrites are the flush's changes to the table: the stored copies it replaces deleted with
// their keys, then its finished jobs stored with theirs.
func (f *Flush) tableWrites(store Store) ([]eventlog.ViewWrite, error) {
	var writes []eventlog.ViewWrite
	for _, id := range sortedKeys(f.drop) {
		if !f.drop[id] || store == nil {
			continue
		}
		v, ok := store.Get([]byte(string(keyJob) + id))
		if !ok {
			continue
		}
		old, err := decodeStored(v)
		if err != nil {
			return nil, fmt.Errorf("projections: stored job %s: %w", id, err)
		}
		writes = append(writes, eventlog.ViewWrite{Key: []byte(string(keyJob) + id), Delete: true})
		for _, k := range keys(old) {
			writes = append(writes, eventlog.ViewWrite{Key: []byte(k), Delete: true})
		}
	}
	for _, j := range f.put {
		v, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		writes = append(writes, eventlog.ViewWrite{Key: []byte(string(keyJob) + j.ID), Value: v})
		for i, k := range keys(j) {
			if mutantTableIndexLost && i == 1 {
				continue
			}
			writes = append(writes, eventlog.ViewWrite{Key: []byte(k), Value: []byte{}})
		}
	}
	return writes, nil
}

// EndFlush records that f is saved: the Store now holds its finished jobs, so memory lets go of
// those that have not changed since. A Set without a Store keeps them.
func (s *Set) EndFlush(f *Flush) {
	if s.store == nil {
		return
	}
	seq := f.Seq()
	put := make(map[string]bool, len(f.put))
	for _, j := range f.put {
		put[j.ID] = true
	}
	for id := range f.drop {
		d, ok := s.dirty[id]
		if !ok {
			continue
		}
		if d.seq > seq && !mutantStaleTableCopy { // changed again since: the next flush replaces what this one stored
			d.stored = put[id]
			s.dirty[id] = d
			continue
		}
		delete(s.dirty, id)
		if j := s.jobs[id]; j != nil && j.Status.Terminal() {
			s.keys.drop(j)
			delete(s.jobs, id)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// WriteFold writes the whole fold the Set holds, wherever it keeps it: the checkpoint, then
// each finished job as a line of JSON, by id, from memory and the table merged. Two Sets that
// folded the same records write the same bytes however and whenever they flushed, which is how
// tests, the simulator and `tether replay` compare them.
func (s *Set) WriteFold(w io.Writer) error {
	if err := s.WriteCheckpoint(w); err != nil {
		return err
	}
	var mem []*Job
	for _, j := range s.jobs {
		if j.Status.Terminal() {
			mem = append(mem, j)
		}
	}
	slices.SortFunc(mem, func(a, b *Job) int { return strings.Compare(a.ID, b.ID) })
	bw := bufio.NewWriter(w)
	write := func(b []byte) error {
		bw.WriteByte('\n')
		_, err := bw.Write(b) // bufio keeps the first error: this one is every earlier one's too
		return err
	}
	writeMem := func(j *Job) error {
		b, err := json.Marshal(j)
		if err != nil {
			return err
		}
		return write(b)
	}
	var err error
	if s.store != nil {
		s.store.Scan([]byte{keyJob}, nil, false, func(key, value []byte) bool {
			id := string(key[1:])
			if s.masked(id) {
				return true
			}
			for len(mem) > 0 && mem[0].ID < id && err == nil {
				err, mem = writeMem(mem[0]), mem[1:]
			}
			if err == nil {
				err = write(value)
			}
			return err == nil
		})
	}
	for _, j := range mem {
		if err == nil {
			err = writeMem(j)
		}
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

// MarshalFold returns what WriteFold writes.
func (s *Set) MarshalFold() ([]byte, error) {
	var buf bytes.Buffer
	err := s.WriteFold(&buf)
	return buf.Bytes(), err
}

// CheckTable checks the table's indexes against its jobs: every stored job has exactly its
// keys, and there is no key of a job that is not stored. It returns the number of stored jobs.
// It reads the whole table in key order, once for the jobs and once for the indexes, and
// compares a digest of the keys the jobs should have (a count, and the sum and the XOR of a
// seeded hash of each) with one of the keys there are: for the simulator and `tether replay
// verify`, not for a server.
func CheckTable(store Store) (int, error) {
	var want, have keyDigest
	seed := maphash.MakeSeed()
	jobs := 0
	var err error
	store.Scan([]byte{keyJob}, nil, false, func(key, value []byte) bool {
		var j *Job
		if j, err = decodeStored(value); err != nil {
			err = fmt.Errorf("projections: stored job %s: %w", key[1:], err)
			return false
		}
		if string(key[1:]) != j.ID || !j.Status.Terminal() {
			err = fmt.Errorf("projections: the table holds job %s under %q as %s", j.ID, key, j.Status)
			return false
		}
		jobs++
		for _, k := range keys(j) {
			want.add(seed, []byte(k))
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	for _, p := range []byte{keyList, keyDone, keyTTL, keyDead} {
		store.Scan([]byte{p}, nil, false, func(key, _ []byte) bool {
			have.add(seed, key)
			return true
		})
	}
	if have != want {
		return 0, fmt.Errorf("projections: the table's %d index keys are not those of its %d jobs, which have %d", have.n, jobs, want.n)
	}
	return jobs, nil
}

// keyDigest sums up a set of keys so that two sets compare in constant memory.
type keyDigest struct{ n, sum, xor uint64 }

func (d *keyDigest) add(seed maphash.Seed, key []byte) {
	h := maphash.Bytes(seed, key)
	d.n, d.sum, d.xor = d.n+1, d.sum+h, d.xor^h
}
