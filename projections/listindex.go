package projections

import (
	"github.com/google/btree"
)

// listIndex orders each tenant's jobs by id — ULIDs, so by submission — as a whole and by each
// field List filters on (status, queue, type), so that a page costs its length, not the
// history, and a dashboard's poll holds the projections' read lock that briefly. A B-tree keeps
// inserts and deletes at O(log n) on the commit path: a job enters four trees when it is
// submitted and moves between two status trees on each change of status.
type listIndex map[indexKey]*btree.BTreeG[string]

// indexKey names one tree: a tenant's jobs, or those whose field has value.
type indexKey struct {
	tenant string
	field  indexField
	value  string
}

type indexField uint8

const (
	byNothing indexField = iota
	byStatus
	byQueue
	byType
)

// indexDegree is the B-trees' degree: nodes of up to 63 ids, a few cache lines each.
const indexDegree = 32

func lessID(a, b string) bool { return a < b }

func (x listIndex) tree(k indexKey) *btree.BTreeG[string] {
	t := x[k]
	if t == nil {
		t = btree.NewG(indexDegree, lessID)
		x[k] = t
	}
	return t
}

func (x listIndex) remove(k indexKey, id string) {
	if t := x[k]; t != nil {
		t.Delete(id)
		if t.Len() == 0 {
			delete(x, k)
		}
	}
}

// add indexes a job under every key.
func (x listIndex) add(j *Job) {
	for _, k := range keysOf(j) {
		x.tree(k).ReplaceOrInsert(j.ID)
	}
}

// drop removes a job from every key.
func (x listIndex) drop(j *Job) {
	for _, k := range keysOf(j) {
		x.remove(k, j.ID)
	}
}

// moved re-files a job whose status changed from was.
func (x listIndex) moved(j *Job, was Status) {
	x.remove(indexKey{j.Tenant, byStatus, string(was)}, j.ID)
	x.tree(indexKey{j.Tenant, byStatus, string(j.Status)}).ReplaceOrInsert(j.ID)
}

func keysOf(j *Job) [4]indexKey {
	return [4]indexKey{{j.Tenant, byNothing, ""}, {j.Tenant, byStatus, string(j.Status)}, {j.Tenant, byQueue, j.Queue}, {j.Tenant, byType, j.Type}}
}

// page walks the tree of k from after (exclusive; "" for the start), newest first if
// descending, and collects up to n ids for which keep holds.
func (x listIndex) page(k indexKey, after string, descending bool, n int, keep func(id string) bool) []string {
	t := x[k]
	if t == nil || n <= 0 {
		return nil
	}
	var out []string
	visit := func(id string) bool {
		if id == after || !keep(id) {
			return true
		}
		out = append(out, id)
		return len(out) < n
	}
	switch {
	case descending && after != "":
		t.DescendLessOrEqual(after, visit)
	case descending:
		t.Descend(visit)
	case after != "":
		t.AscendGreaterOrEqual(after, visit)
	default:
		t.Ascend(visit)
	}
	return out
}
