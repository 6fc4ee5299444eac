package cells

import (
	"container/heap"
	"time"
)

// Agenda is the timer queue of a virtual clock: functions due at instants, taken in order of
// time and, at one instant, in the order they were put. The deterministic drivers (the
// simulator, actorstest) keep the current time and take what is due from it.
type Agenda struct {
	items agendaHeap
	seq   uint64
}

// Item is one entry of an Agenda.
type Item struct {
	At        time.Time
	Label     string
	Run       func()
	seq       uint64
	cancelled bool
}

// Stop keeps the item from being taken; it reports whether it had not been stopped before.
func (it *Item) Stop() bool {
	was := !it.cancelled
	it.cancelled = true
	return was
}

// At puts fn on the agenda at instant at.
func (a *Agenda) At(at time.Time, label string, fn func()) *Item {
	a.seq++
	it := &Item{At: at, Label: label, Run: fn, seq: a.seq}
	heap.Push(&a.items, it)
	return it
}

// Again puts an item taken before back on the agenda at instant at, as it was: stopping it
// still keeps it from being taken (the simulator holds a paused process's items so).
func (a *Agenda) Again(it *Item, at time.Time) {
	a.seq++
	it.At, it.seq = at, a.seq
	heap.Push(&a.items, it)
}

// Next returns the earliest item not cancelled, without taking it.
func (a *Agenda) Next() (*Item, bool) {
	for len(a.items) > 0 && a.items[0].cancelled {
		heap.Pop(&a.items)
	}
	if len(a.items) == 0 {
		return nil, false
	}
	return a.items[0], true
}

// Take removes and returns the earliest item not cancelled.
func (a *Agenda) Take() (*Item, bool) {
	it, ok := a.Next()
	if ok {
		heap.Pop(&a.items)
	}
	return it, ok
}

type agendaHeap []*Item

func (h agendaHeap) Len() int { return len(h) }
func (h agendaHeap) Less(i, j int) bool {
	if c := h[i].At.Compare(h[j].At); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h agendaHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *agendaHeap) Push(x any)   { *h = append(*h, x.(*Item)) }
func (h *agendaHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
