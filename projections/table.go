package projections

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"io"
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
// on disk beside the log (eventlog.Views), written only by a flush, in the atomic change that
// saves the checkpoint of the same seq (eventlog.SaveCheckpoint). So memory, checkpoints and start-up cost
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
//	g <id>                                   a tombstone: <seq of its job.expired: 8> <tenant>
//	                                         for a job that left every view, kept for as long
//	                                         as the table, so that the job answers JOB_EXPIRED
//	                                         to its tenant once the log no longer holds its
//	                                         history (archive segments deleted)
//
// Memory keeps the same entries (the part of an l, d, t or x key after its prefix) for the jobs
// it holds, an ordered set per prefix (memIndex); a query merges them with the Store's keys,
// leaving out a stored key of any job that memory holds or that changed since the last flush
// (dirty): memory's copy, or its absence, wins.
//
// INVARIANT: a job id is in the Store's current answer (not masked) only if it is neither in
// jobs nor in dirty; every job in jobs has exactly its entries in memory.
// INVARIANT: the Store holds exactly the finished jobs of the fold at the last flush's seq that
// were not in memory then, with exactly their keys.
// INVARIANT: no id has both a job (j) and a tombstone (g): a job expires once, as its last
// event, and ids are never reused.

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
	keyGone = 'g'
)

// tombstone is what is kept of a job that expired: its tenant, and the seq of its job.expired.
type tombstone struct {
	seq    uint64
	tenant string
}

func (t tombstone) value() []byte {
	return append(binary.BigEndian.AppendUint64(nil, t.seq), t.tenant...)
}

func tombstoneOf(v []byte) (tombstone, bool) {
	if len(v) < 8 {
		return tombstone{}, false
	}
	return tombstone{seq: binary.BigEndian.Uint64(v), tenant: string(v[8:])}, true
}

// Gone reports whether job id expired, and its tenant: from memory for a job that expired
// since the last flush, from the table's tombstone for one before. A job expired under a build
// that kept no tombstones, or before the checkpoint a Set was restored from that had none, is
// not gone here; its stream in the log still says so while the log holds it.
func (s *Set) Gone(id string) (tenant string, ok bool) {
	if t, ok := s.gone[id]; ok {
		return t.tenant, true
	}
	if s.store == nil || s.jobs[id] != nil {
		return "", false
	}
	v, ok := s.store.Get([]byte(string(keyGone) + id))
	if !ok {
		return "", false
	}
	t, ok := tombstoneOf(v)
	return t.tenant, ok
}

// The fields of List's index.
const (
	byNothing = 0
	byStatus  = 's'
	byQueue   = 'q'
	byType    = 'y'
	byLabel   = 'L'
)

// index names one ordered set of index entries: List's (a tenant's jobs, or those whose field
// has value), or a retention class (all done jobs, all with a TTL, or a tenant's dead letters).
// An entry is the part of its key after the prefix: a job id, or for a timed class an 8-byte
// time and the id.
type index struct {
	kind   byte   // keyList, keyDone, keyTTL or keyDead
	tenant string // keyList, keyDead
	field  byte   // keyList
	value  string // keyList
}

func listIndex(tenant string, field byte, value string) index {
	return index{kind: keyList, tenant: tenant, field: field, value: value}
}

func deadIndex(tenant string) index { return index{kind: keyDead, tenant: tenant} }

// timed reports whether the index's entries start with a time.
func (x index) timed() bool { return x.kind != keyList }

// appendPrefix appends the index's key prefix in the table.
func (x index) appendPrefix(b []byte) []byte {
	b = append(b, x.kind)
	switch x.kind {
	case keyList:
		b = append(append(b, x.tenant...), 0, x.field)
		b = append(append(b, x.value...), 0)
	case keyDead:
		b = append(append(b, x.tenant...), 0)
	}
	return b
}

// idOf is the job id of an entry.
func (x index) idOf(entry string) string {
	if x.timed() {
		return entry[8:]
	}
	return entry
}

func keyTime(s string) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64([]byte(s[:8])))).UTC()
}

func appendTime(b []byte, t time.Time) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(t.UnixNano()))
}

// LabelsIndexedMax is how many of a job's labels List's index holds, in key order; the job
// spec allows no more.
const LabelsIndexedMax = 32

// entries calls add with each index a job is in and its entry there: List's (every job of its
// tenant, then by status, queue, type and each label as key=value, a label with NUL in its value
// left out), then, for a finished job, its retention class. List's entries are the job's id
// itself, so the commit path makes no string for them.
func entries(j *Job, add func(index, string)) {
	add(listIndex(j.Tenant, byNothing, ""), j.ID)
	add(listIndex(j.Tenant, byStatus, string(j.Status)), j.ID)
	add(listIndex(j.Tenant, byQueue, j.Queue), j.ID)
	add(listIndex(j.Tenant, byType, j.Type), j.ID)
	if len(j.Labels) > 0 {
		labels := make([]string, 0, len(j.Labels))
		for k, v := range j.Labels {
			if !strings.Contains(v, "\x00") {
				labels = append(labels, k)
			}
		}
		slices.Sort(labels) // one order: a checkpoint's batch is the same every run
		for _, k := range labels[:min(len(labels), LabelsIndexedMax)] {
			add(listIndex(j.Tenant, byLabel, k+"="+j.Labels[k]), j.ID)
		}
	}
	if j.Status.Terminal() {
		x, e := retention(j)
		add(x, e)
	}
}

// retention is a finished job's retention class and its entry there, ordered by when it is due
// to leave the views.
func retention(j *Job) (index, string) {
	var b [8 + 64]byte
	switch {
	case j.Status == StatusFailed:
		return deadIndex(j.Tenant), string(append(appendTime(b[:0], j.FinishedAt), j.ID...))
	case j.ResultTTL > 0:
		return index{kind: keyTTL}, string(append(appendTime(b[:0], j.FinishedAt.Add(j.ResultTTL)), j.ID...))
	default:
		return index{kind: keyDone}, string(append(appendTime(b[:0], j.FinishedAt), j.ID...))
	}
}

// memIndex holds the index entries of the jobs in memory, an ordered set per index.
type memIndex map[index]*btree.BTreeG[string]

// indexDegree is the trees' degree: nodes of up to 63 entries.
const indexDegree = 32

func lessEntry(a, b string) bool { return a < b }

func (m memIndex) insert(x index, e string) {
	t := m[x]
	if t == nil {
		t = btree.NewG(indexDegree, lessEntry)
		m[x] = t
	}
	t.ReplaceOrInsert(e)
}

func (m memIndex) remove(x index, e string) {
	if t := m[x]; t != nil {
		t.Delete(e)
		if t.Len() == 0 {
			delete(m, x)
		}
	}
}

func (m memIndex) add(j *Job) {
	if m != nil {
		entries(j, m.insert)
	}
}

func (m memIndex) drop(j *Job) {
	if m != nil {
		entries(j, m.remove)
	}
}

// len is the number of entries of x.
func (m memIndex) len(x index) int {
	if t := m[x]; t != nil {
		return t.Len()
	}
	return 0
}

// has reports whether x holds entry e.
func (m memIndex) has(x index, e string) bool {
	t := m[x]
	return t != nil && t.Has(e)
}

// scan calls fn with the entries of x from start (included; "" for the first), in order or
// in reverse, until fn returns false.
func (m memIndex) scan(x index, start string, reverse bool, fn func(entry string) bool) {
	t := m[x]
	switch {
	case t == nil:
	case reverse && start != "":
		t.DescendLessOrEqual(start, fn)
	case reverse:
		t.Descend(fn)
	default:
		t.AscendGreaterOrEqual(start, fn)
	}
}

// dirtyMark says a job's stored copy, if any, is stale: the job changed at seq since the last
// flush began. stored is the copy the Store holds, which the next flush must delete or replace
// with its index keys, or nil: the job as it was read from the Store, or as a flush stored it.
// Keeping it saves that flush a read and a decode of every job it replaces; like every finished
// job in memory it is never changed in place.
type dirtyMark struct {
	seq    uint64
	stored *Job
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
	return readStored(s.store, id)
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
	if !j.Status.Terminal() {
		panic(fmt.Sprintf("projections: stored job %s is %s", id, j.Status)) // only a Flush writes it
	}
	s.jobs[id] = j
	s.index.add(j)
	s.dirty[id] = dirtyMark{seq: s.seq, stored: j}
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

// scanMerged returns the entries of x from start (included; "" for the first) in order or in
// reverse, from memory and the table merged, the table's masked jobs left out: up to n that
// keep takes, keep being told how many its side took before. Each side stops at n or at keep's
// stop, so a scan costs a page and what keep skips.
func (s *Set) scanMerged(x index, start string, reverse bool, n int, keep func(entry string, taken int) verdict) []string {
	if s.unindexed {
		panic("projections: an index scan of a Set that keeps no index")
	}
	var mem, disk []string
	// collect adds e to a side if keep takes it, and reports whether the side goes on.
	collect := func(side *[]string, e string) bool {
		switch keep(e, len(*side)) {
		case take:
			*side = append(*side, e)
		case stop:
			return false
		}
		return len(*side) < n
	}
	s.index.scan(x, start, reverse, func(e string) bool { return collect(&mem, e) })
	if s.store != nil && n > 0 {
		prefix := x.appendPrefix(nil)
		var startKey []byte
		if start != "" {
			startKey = append(slices.Clip(prefix), start...)
		}
		s.store.Scan(prefix, startKey, reverse, func(key, _ []byte) bool {
			e := string(key[len(prefix):])
			if len(mem) == n && (e > mem[n-1]) != reverse {
				return false // past memory's n-th: none of the rest can be among the first n
			}
			return s.masked(x.idOf(e)) || collect(&disk, e)
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

// Flush is a checkpoint in the making: the Set's live state at Seq, and the changes to the
// finished jobs' table since the last flush. BeginFlush takes it under the lock that guards the
// Set, in time proportional to the live jobs and to what changed; Encode turns it into bytes
// off that lock, while the Set goes on; EndFlush, once the checkpoint is saved, lets the Set
// drop from memory what the Store now holds.
type Flush struct {
	seq  uint64
	live *Set // nil for a Spill, which keeps no checkpoint
	// ids are the jobs that changed since the last flush, by id, and had holds the copies of
	// them that the table holds, which go or are replaced.
	ids []string
	had map[string]*Job
	put []*Job // the finished ones among them, by id, shared with the Set, which never changes them
	// gone are the tombstones of those that expired, by id.
	gone []goneJob
	// ended is how many of ids EndFlushPart has done.
	ended int
	// unindexed: the table holds the jobs without their index keys (NewUnindexedOn).
	unindexed bool
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

// BeginSpill starts moving the finished jobs that changed since the last flush to the Set's
// Store, keeping no checkpoint: how a fold that is no server's (`tether replay`) keeps its
// memory to what is live. The caller writes the flush's Writes to the Store, on any goroutine,
// while the Set goes on, then calls EndFlush. Until then the Set reads those jobs from memory.
func (s *Set) BeginSpill() *Flush { return s.changes() }

// Len is how many jobs the flush covers.
func (f *Flush) Len() int { return len(f.ids) }

// Writes are the flush's changes to the table, for a spill's caller to apply. Like Encode, it
// reads neither the Set nor the Store.
func (f *Flush) Writes() ([]eventlog.ViewWrite, error) { return f.tableWrites() }

// changes is a Flush of what changed since the last one, without the live state.
func (s *Set) changes() *Flush {
	f := &Flush{seq: s.seq, ids: sortedKeys(s.dirty), had: make(map[string]*Job, len(s.dirty)), unindexed: s.unindexed}
	for _, id := range f.ids {
		if j := s.jobs[id]; j != nil && j.Status.Terminal() {
			f.put = append(f.put, j) // never changed in place (Apply), so no copy
		}
		if was := s.dirty[id].stored; was != nil {
			f.had[id] = was
		}
		if t, ok := s.gone[id]; ok {
			f.gone = append(f.gone, goneJob{id, t})
		}
	}
	return f
}

type goneJob struct {
	id string
	tombstone
}

// stores returns the copy of the job that the flush stores, or nil.
func (f *Flush) stores(id string) *Job {
	i, ok := slices.BinarySearchFunc(f.put, id, func(j *Job, id string) int { return strings.Compare(j.ID, id) })
	if !ok {
		return nil
	}
	return f.put[i]
}

// Encode returns the checkpoint's bytes and the writes to the table that go with them. It reads
// neither the Set nor the Store: the flush holds all it needs.
func (f *Flush) Encode() ([]byte, []eventlog.ViewWrite, error) {
	data, err := f.live.MarshalCheckpoint()
	if err != nil {
		return nil, nil, err
	}
	writes, err := f.tableWrites()
	return data, writes, err
}

// tableWrites are the flush's changes to the table: the stored copies it replaces deleted with
// their keys, then its finished jobs stored with theirs, then the tombstones.
//
// They come in a few ascending runs: a run of writes for each index (or the jobs' rows, or the
// tombstones), its deletes apart from its puts, each over the jobs in id order, whose entries
// ascend with them (a timed index's nearly so), and the runs, deletes before puts, by their
// first keys after the rows. The log sorts a checkpoint's keys by merging the ascending runs
// they come in (eventlog's sortIngestKeys): a comparison or two a key, where the keys of one
// job after another's cost a full sort's.
func (f *Flush) tableWrites() ([]eventlog.ViewWrite, error) {
	var arena keyArena
	runs := writeRuns{writes: make([]eventlog.ViewWrite, 0, 8*len(f.put)+len(f.ids))}
	empty := []byte{}
	for _, id := range f.ids {
		old := f.had[id]
		if old == nil {
			continue
		}
		runs.add(0, index{kind: keyJob}, true, eventlog.ViewWrite{Key: arena.key(index{kind: keyJob}, id), Delete: true})
		if !f.unindexed {
			slot := 1
			entries(old, func(x index, e string) {
				runs.add(slot, x, true, eventlog.ViewWrite{Key: arena.key(x, e), Delete: true})
				slot++
			})
		}
	}
	for _, j := range f.put {
		v, err := arena.job(j)
		if err != nil {
			return nil, err
		}
		runs.add(0, index{kind: keyJob}, false, eventlog.ViewWrite{Key: arena.key(index{kind: keyJob}, j.ID), Value: v})
		if f.unindexed {
			continue
		}
		slot := 1
		entries(j, func(x index, e string) {
			if mutantTableIndexLost && x.field == byStatus {
				return
			}
			runs.add(slot, x, false, eventlog.ViewWrite{Key: arena.key(x, e), Value: empty})
			slot++
		})
	}
	for _, g := range f.gone {
		runs.add(0, index{kind: keyGone}, false, eventlog.ViewWrite{Key: arena.key(index{kind: keyGone}, g.id), Value: g.value()})
	}
	return runs.sorted(), nil
}

// writeRuns gathers a flush's writes with the run each belongs to: its index (or the jobs'
// rows, or the tombstones), its deletes apart from its puts. sorted lays the runs end to end by
// their first keys, each in the order written: a stable counting sort by run.
type writeRuns struct {
	writes []eventlog.ViewWrite
	run    []int32 // each write's run
	at     map[writeRun]int32
	count  []int // writes by run
	// last is the run of the last write in each slot of a job (its row, then its entries in
	// the order entries gives them): consecutive jobs mostly share their indexes, so this
	// spares most writes a look in at.
	last []lastRun
}

type writeRun struct {
	index
	delete bool
}

type lastRun struct {
	writeRun
	run int32
}

// add appends w, the slot-th write of its job, to x's run of deletes or puts.
func (r *writeRuns) add(slot int, x index, delete bool, w eventlog.ViewWrite) {
	k := writeRun{x, delete}
	for slot >= len(r.last) {
		r.last = append(r.last, lastRun{run: -1})
	}
	c := &r.last[slot]
	if c.run < 0 || c.writeRun != k {
		if r.at == nil {
			r.at = map[writeRun]int32{}
		}
		i, ok := r.at[k]
		if !ok {
			i = int32(len(r.count))
			r.at[k] = i
			r.count = append(r.count, 0)
		}
		*c = lastRun{k, i}
	}
	r.writes = append(r.writes, w)
	r.run = append(r.run, c.run)
	r.count[c.run]++
}

func (r *writeRuns) sorted() []eventlog.ViewWrite {
	if len(r.count) <= 1 {
		return r.writes
	}
	// The deletes before the puts, as written: a store that applies the writes in order (a
	// spill's) must delete a job's old keys before it puts the new ones. In each, the jobs'
	// rows first, as the writes always began, then the other runs by their first keys: the runs
	// of two indexes do not interleave (names hold no NUL, which ends each), so the writes are
	// a few ascending runs.
	first := make([][]byte, len(r.count))
	deletes := make([]bool, len(r.count))
	for i := len(r.writes) - 1; i >= 0; i-- {
		first[r.run[i]], deletes[r.run[i]] = r.writes[i].Key, r.writes[i].Delete
	}
	order := make([]int32, len(r.count))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		return cmp.Or(boolCompare(!deletes[a], !deletes[b]), boolCompare(first[a][0] != keyJob, first[b][0] != keyJob),
			bytes.Compare(first[a], first[b]))
	})
	start := make([]int, len(r.count))
	at := 0
	for _, i := range order {
		start[i] = at
		at += r.count[i]
	}
	out := make([]eventlog.ViewWrite, len(r.writes))
	for i, w := range r.writes {
		out[start[r.run[i]]] = w
		start[r.run[i]]++
	}
	return out
}

// keyArena hands out keys and values carved from large buffers: a flush writes several a job.
type keyArena struct{ buf []byte }

// key returns x's prefix and entry e as a slice of the arena that nothing else will write.
func (a *keyArena) key(x index, e string) []byte {
	a.room(len(x.tenant) + len(x.value) + len(e) + 4)
	start := len(a.buf)
	a.buf = append(x.appendPrefix(a.buf), e...)
	return a.buf[start:len(a.buf):len(a.buf)]
}

// job returns j's encoding (encodeJob) as a slice of the arena.
func (a *keyArena) job(j *Job) ([]byte, error) {
	a.room(2 << 10)
	start := len(a.buf)
	b, ok := appendJob(a.buf, j)
	if !ok {
		v, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		b = append(a.buf, v...)
	}
	a.buf = b
	return a.buf[start:len(a.buf):len(a.buf)], nil
}

// room makes sure the arena has n bytes free, starting a new buffer if not; slices handed out
// keep the old one.
func (a *keyArena) room(n int) {
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, max(256<<10, n))
	}
}

// EndFlush records that f is saved: the Store now holds its finished jobs, so memory lets go of
// those that have not changed since. A Set without a Store keeps them.
func (s *Set) EndFlush(f *Flush) { s.EndFlushPart(f, len(f.ids)) }

// EndFlushPart does EndFlush's work for up to n more of the flush's jobs and reports whether it
// is done: a runtime ends a flush of many jobs in parts, so that no part holds the lock that
// commits wait on for long. Events applied between the parts are safe: a job they change stays.
func (s *Set) EndFlushPart(f *Flush, n int) (done bool) {
	if s.store == nil {
		return true
	}
	seq := f.Seq()
	for ; n > 0 && f.ended < len(f.ids); n, f.ended = n-1, f.ended+1 {
		id := f.ids[f.ended]
		d, ok := s.dirty[id]
		if !ok {
			continue
		}
		if d.seq > seq && !mutantStaleTableCopy { // changed again since: the next flush replaces what this one stored
			d.stored = f.stores(id)
			s.dirty[id] = d
			continue
		}
		delete(s.dirty, id)
		delete(s.gone, id) // the table holds its tombstone now
		if j := s.jobs[id]; j != nil && j.Status.Terminal() {
			s.index.drop(j)
			delete(s.jobs, id)
		}
	}
	return f.ended == len(f.ids)
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
// each finished job as a line of JSON, by id, from memory and the table merged, then each
// tombstone from goneFrom on, the same way. Two Sets that folded the same records write the
// same bytes however and whenever they flushed, which is how tests, the simulator and `tether
// replay` compare them.
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
		b, err := encodeJob(j)
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
	if err == nil {
		err = s.writeGone(write)
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

// writeGone writes WriteFold's tombstones, those from goneFrom on, by id.
func (s *Set) writeGone(write func([]byte) error) error {
	type line struct {
		Gone   string `json:"gone"`
		Tenant string `json:"tenant"`
		Seq    uint64 `json:"seq"`
	}
	writeOne := func(id string, t tombstone) error {
		if t.seq < s.goneFrom {
			return nil
		}
		b, err := json.Marshal(line{id, t.tenant, t.seq})
		if err != nil {
			return err
		}
		return write(b)
	}
	mem := sortedKeys(s.gone)
	var err error
	if s.store != nil {
		s.store.Scan([]byte{keyGone}, nil, false, func(key, value []byte) bool {
			id := string(key[1:])
			if _, ok := s.gone[id]; ok {
				return true // saved by a flush not ended yet: memory's copy is written below
			}
			for len(mem) > 0 && mem[0] < id && err == nil {
				err, mem = writeOne(mem[0], s.gone[mem[0]]), mem[1:]
			}
			t, ok := tombstoneOf(value)
			if !ok {
				err = fmt.Errorf("projections: the tombstone of job %s is %d bytes", id, len(value))
			}
			if err == nil {
				err = writeOne(id, t)
			}
			return err == nil
		})
	}
	for _, id := range mem {
		if err == nil {
			err = writeOne(id, s.gone[id])
		}
	}
	return err
}

// KeepGoneFrom makes the Set's fold leave out the tombstones of expiries before seq, as a Set
// restored from an older build's checkpoint at seq-1 does: how `tether replay verify` compares
// a replay from genesis with such a checkpoint.
func (s *Set) KeepGoneFrom(seq uint64) { s.goneFrom = max(s.goneFrom, seq) }

// GoneFrom is the first seq whose expiries the Set keeps a tombstone of (0: every one).
func (s *Set) GoneFrom() uint64 { return s.goneFrom }

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
		if j, err = decodeJob(value); err != nil {
			err = fmt.Errorf("projections: stored job %s: %w", key[1:], err)
			return false
		}
		if string(key[1:]) != j.ID || !j.Status.Terminal() {
			err = fmt.Errorf("projections: the table holds job %s under %q as %s", j.ID, key, j.Status)
			return false
		}
		jobs++
		entries(j, func(x index, e string) { want.add(seed, append(x.appendPrefix(nil), e...)) })
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
	store.Scan([]byte{keyJob}, nil, false, func(key, _ []byte) bool {
		if _, gone := store.Get(append([]byte{keyGone}, key[1:]...)); gone {
			err = fmt.Errorf("projections: the table holds job %s and its tombstone", key[1:])
		}
		return err == nil
	})
	if err != nil {
		return 0, err
	}
	return jobs, nil
}

// CheckTable checks the Set's table (the package's CheckTable) and how memory masks it: a job
// the table holds and memory holds too is marked to be replaced or deleted by the next flush.
func (s *Set) CheckTable() (int, error) {
	if s.store == nil {
		return 0, nil
	}
	n, err := CheckTable(s.store)
	if err != nil {
		return 0, err
	}
	s.store.Scan([]byte{keyJob}, nil, false, func(key, _ []byte) bool {
		id := string(key[1:])
		if _, inMemory := s.jobs[id]; inMemory && s.dirty[id].stored == nil {
			err = fmt.Errorf("projections: job %s is in memory and in the table, and no flush will replace its stored copy", id)
		}
		return err == nil
	})
	return n, err
}

// keyDigest sums up a set of keys so that two sets compare in constant memory.
type keyDigest struct{ n, sum, xor uint64 }

func (d *keyDigest) add(seed maphash.Seed, key []byte) {
	h := maphash.Bytes(seed, key)
	d.n, d.sum, d.xor = d.n+1, d.sum+h, d.xor^h
}
