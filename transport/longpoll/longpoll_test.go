package longpoll

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tetherhq/tether/actors"
)

var (
	a1 = actors.Assignment{JobID: "j1", LeaseID: "l1"}
	a2 = actors.Assignment{JobID: "j2", LeaseID: "l2"}
)

// inputs is one of every input; Assigned brings a2.
var inputs = []Input{OfferAcked{}, OfferAcked{Refused: true}, Assigned{a2}, WaitOver{}, ClientGone{}, OfferEnded{}, SessionEnded{},
	OfferEndOverdue{}}

// reach returns a poll of one slot in state s; from Withdrawing on, it holds a1.
func reach(t *testing.T, s State) *Poll {
	t.Helper()
	p := New(1)
	var path []Input
	switch s {
	case Waiting:
		path = []Input{OfferAcked{}}
	case Withdrawing:
		path = []Input{OfferAcked{}, Assigned{a1}}
	case Answered:
		path = []Input{OfferAcked{}, Assigned{a1}, OfferEnded{}}
	case Done:
		path = []Input{OfferAcked{Refused: true}}
	}
	for _, in := range path {
		p.Step(in)
	}
	if p.State() != s {
		t.Fatalf("the path to %s ends in %s", s, p.State())
	}
	return p
}

func one(a actors.Assignment) []actors.Assignment { return []actors.Assignment{a} }

// TestEveryInputInEveryState: given a poll in a state, when an input comes, then this state and
// these actions.
func TestEveryInputInEveryState(t *testing.T) {
	type then struct {
		state State
		act   Actions
	}
	withdraw := Actions{Withdraw: true}
	table := map[State][]then{ // in the order of inputs
		Offering: {
			{Waiting, Actions{}},
			{Done, Actions{}},
			{Offering, Actions{}}, // held until the acknowledgement, which then withdraws
			{Offering, Actions{}}, // likewise
			{Offering, Actions{}},
			{Offering, Actions{}}, // another offer's end
			{Done, Actions{}},
			{Offering, Actions{}},
		},
		Waiting: {
			{Waiting, Actions{}},
			{Waiting, Actions{}},
			{Withdrawing, withdraw},
			{Withdrawing, withdraw},
			{Withdrawing, withdraw},
			{Answered, Actions{Respond: true, Answer: []actors.Assignment{}}},
			{Answered, Actions{Respond: true, Answer: []actors.Assignment{}}},
			{Waiting, Actions{}},
		},
		Withdrawing: {
			{Withdrawing, Actions{}},
			{Withdrawing, Actions{}},
			{Withdrawing, Actions{}},
			{Withdrawing, Actions{}},
			{Withdrawing, Actions{}}, // abandoned: see TestAbandoned
			{Answered, Actions{Respond: true, Answer: one(a1)}},
			{Answered, Actions{Respond: true, Answer: one(a1)}},
			{Answered, Actions{CloseSession: true, Respond: true, Answer: one(a1)}},
		},
		Answered: {
			{Answered, Actions{}},
			{Answered, Actions{}},
			{Answered, Actions{HandBack: one(a2)}},
			{Answered, Actions{}},
			{Done, Actions{HandBack: one(a1)}},
			{Answered, Actions{}},
			{Answered, Actions{}},
			{Answered, Actions{}},
		},
		Done: {
			{Done, Actions{}},
			{Done, Actions{}},
			{Done, Actions{HandBack: one(a2)}},
			{Done, Actions{}},
			{Done, Actions{}},
			{Done, Actions{}},
			{Done, Actions{}},
			{Done, Actions{}},
		},
	}
	for _, s := range []State{Offering, Waiting, Withdrawing, Answered, Done} {
		if len(table[s]) != len(inputs) {
			t.Fatalf("%s: %d cases for %d inputs", s, len(table[s]), len(inputs))
		}
		for i, in := range inputs {
			t.Run(fmt.Sprintf("%s/%T%+v", s, in, in), func(t *testing.T) {
				p := reach(t, s)
				act := p.Step(in)
				want := table[s][i]
				if p.State() != want.state || !sameActions(act, want.act) {
					t.Errorf("got %s %+v, want %s %+v", p.State(), act, want.state, want.act)
				}
			})
		}
	}
}

func sameActions(a, b Actions) bool {
	empty := func(s []actors.Assignment) bool { return len(s) == 0 }
	return a.CloseSession == b.CloseSession && a.Withdraw == b.Withdraw && a.Respond == b.Respond &&
		(empty(a.HandBack) && empty(b.HandBack) || reflect.DeepEqual(a.HandBack, b.HandBack)) &&
		(empty(a.Answer) && empty(b.Answer) || reflect.DeepEqual(a.Answer, b.Answer))
}

// TestPaths: given a sequence of inputs, then the last step's actions and the state.
func TestPaths(t *testing.T) {
	for _, c := range []struct {
		name  string
		max   int
		path  []Input
		state State
		last  Actions
	}{
		{"an assignment before the acknowledgement ends the wait when it comes", 2,
			[]Input{Assigned{a1}, OfferAcked{}}, Withdrawing, Actions{Withdraw: true}},
		{"and is answered", 2,
			[]Input{Assigned{a1}, OfferAcked{}, OfferEnded{}}, Answered, Actions{Respond: true, Answer: one(a1)}},
		{"a wait over before the acknowledgement withdraws when it comes", 1,
			[]Input{WaitOver{}, OfferAcked{}}, Withdrawing, Actions{Withdraw: true}},
		{"a client gone before the acknowledgement withdraws when it comes", 1,
			[]Input{ClientGone{}, OfferAcked{}}, Withdrawing, Actions{Withdraw: true}},
		{"a refused offer hands back what came before its answer", 1,
			[]Input{Assigned{a1}, OfferAcked{Refused: true}}, Done, Actions{HandBack: one(a1)}},
		{"everything the offer brought is answered", 2,
			[]Input{OfferAcked{}, Assigned{a1}, Assigned{a2}, OfferEnded{}}, Answered, Actions{Respond: true, Answer: []actors.Assignment{a1, a2}}},
		{"past the offer's size goes back", 1,
			[]Input{OfferAcked{}, Assigned{a1}, Assigned{a2}, OfferEnded{}}, Answered, Actions{Respond: true, Answer: one(a1), HandBack: one(a2)}},
		{"a session that ends answers what came", 2,
			[]Input{OfferAcked{}, Assigned{a1}, SessionEnded{}}, Answered, Actions{Respond: true, Answer: one(a1)}},
		{"an overdue end closes the session and answers", 2,
			[]Input{OfferAcked{}, WaitOver{}, OfferEndOverdue{}}, Answered, Actions{CloseSession: true, Respond: true}},
		{"an answer that did not reach the worker goes back", 2,
			[]Input{OfferAcked{}, Assigned{a1}, Assigned{a2}, OfferEnded{}, ClientGone{}}, Done, Actions{HandBack: []actors.Assignment{a1, a2}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := New(c.max)
			var act Actions
			for _, in := range c.path {
				act = p.Step(in)
			}
			if p.State() != c.state || !sameActions(act, c.last) {
				t.Errorf("got %s %+v, want %s %+v", p.State(), act, c.state, c.last)
			}
		})
	}
}

// TestAbandoned: a poll whose client went away answers nobody; everything it got goes back,
// however the collecting ends.
func TestAbandoned(t *testing.T) {
	for _, end := range []Input{OfferEnded{}, SessionEnded{}, OfferEndOverdue{}} {
		p := New(2)
		p.Step(OfferAcked{})
		if act := p.Step(ClientGone{}); !act.Withdraw {
			t.Fatalf("a client gone while the offer stands does not withdraw it: %+v", act)
		}
		p.Step(Assigned{a1})
		act := p.Step(end)
		if act.Respond || !reflect.DeepEqual(act.HandBack, one(a1)) || p.State() != Done {
			t.Errorf("%T: got %s %+v, want done, a1 handed back", end, p.State(), act)
		}
	}
}

// TestRandomInputs drives polls with random inputs (the seed is printed) and checks the
// capacity rule: the offer never outlives the poll (no answer while it stands), and every
// assignment is answered or handed back once (an answer that failed is handed back after), or
// still held by the poll.
func TestRandomInputs(t *testing.T) {
	const seed = 39
	rng := rand.New(rand.NewPCG(seed, seed))
	all := []Input{OfferAcked{}, OfferAcked{Refused: true}, WaitOver{}, ClientGone{}, OfferEnded{}, SessionEnded{}, OfferEndOverdue{}}
	for run := range 2000 {
		p := New(1 + rng.IntN(3))
		fate := map[string]string{} // "answered", then perhaps "back" once the answer failed; or "back"
		var fed []string
		standing := false // the session holds the offer
		for step := range 12 {
			var in Input
			if rng.IntN(3) == 0 {
				a := actors.Assignment{LeaseID: fmt.Sprintf("l%d", step)}
				fed = append(fed, a.LeaseID)
				in = Assigned{a}
			} else {
				in = all[rng.IntN(len(all))]
			}
			before := p.State()
			act := p.Step(in)
			switch m := in.(type) {
			case OfferAcked:
				standing = standing || before == Offering && !m.Refused
			case OfferEnded, SessionEnded:
				standing = false
			}
			if act.Withdraw || act.CloseSession {
				standing = false
			}
			if (act.Respond || p.State() == Done) && standing {
				t.Fatalf("seed %d run %d: the poll ended (%s after %T) with its offer standing", seed, run, p.State(), in)
			}
			for _, a := range act.Answer {
				if fate[a.LeaseID] != "" {
					t.Fatalf("seed %d run %d: lease %s answered after it was %s", seed, run, a.LeaseID, fate[a.LeaseID])
				}
				fate[a.LeaseID] = "answered"
			}
			for _, a := range act.HandBack {
				if f := fate[a.LeaseID]; f == "back" || f == "answered" && before != Answered {
					t.Fatalf("seed %d run %d: lease %s handed back after it was %s", seed, run, a.LeaseID, f)
				}
				fate[a.LeaseID] = "back"
			}
		}
		for _, id := range fed {
			if fate[id] == "" && !p.holds(id) {
				t.Fatalf("seed %d run %d: lease %s was neither answered nor handed back, and the poll (%s) does not hold it", seed, run, id, p.State())
			}
		}
	}
}

// holds reports whether the poll still holds the lease (in its answer, until the shell says
// it was delivered or not).
func (p *Poll) holds(lease string) bool {
	for _, a := range p.got {
		if a.LeaseID == lease {
			return true
		}
	}
	return false
}
