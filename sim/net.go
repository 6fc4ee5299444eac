package sim

import (
	"fmt"
	"time"

	"github.com/tetherhq/tether/actors"
)

// transmit carries one message between a party and the server. It may be lost, delayed,
// overtaken by later messages or duplicated; a party cut off by a partition neither sends nor
// receives.
func (s *Sim) transmit(party, what string, deliver func()) {
	if s.cutOff(party) {
		s.record("cut off: " + party + " " + what)
		return
	}
	if s.strikes(FaultDrop, 0.06) {
		s.record("lost: " + party + " " + what)
		return
	}
	copies := 1
	if s.strikes(FaultDup, 0.04) {
		copies = 2
	}
	for range copies {
		d := time.Duration(200+s.network.IntN(2800)) * time.Microsecond
		if s.strikes(FaultDelay, 0.03) {
			d += time.Duration(s.faultRand[FaultDelay].IntN(5000)) * time.Millisecond
		}
		if s.strikes(FaultReorder, 0.1) {
			d += time.Duration(s.faultRand[FaultReorder].IntN(50_000)) * time.Microsecond
		}
		s.after(d, party+" "+what, func() {
			if !s.cutOff(party) {
				deliver()
			}
		})
	}
}

func (s *Sim) cutOff(party string) bool {
	until, ok := s.partitioned[party]
	if ok && !s.now.Before(until) {
		delete(s.partitioned, party)
		return false
	}
	return ok
}

// call sends a command from a party to an actor and waits for its reply: onReply gets the
// first reply to arrive, onTimeout runs if none does within the timeout. What the server sends
// back is checked where it leaves the server, before the network sees it.
func (s *Sim) call(party, what string, to func(*server) actors.Ref, msg any, onReply func(any), onTimeout func()) {
	answered := false
	s.transmit(party, what, func() {
		v := s.srv
		v.reach(func() {
			if !v.up || v.recovering {
				return // refused: the server is down or not ready
			}
			v.request(party, to(v), msg, func(reply any) {
				s.checkReply(v, party, msg, reply)
				s.transmit(party, fmt.Sprintf("reply %T", reply), func() {
					if !answered {
						answered = true
						onReply(reply)
					}
				})
			})
		})
	})
	s.after(requestTimeout, party+" timeout "+what, func() {
		if !answered {
			answered = true
			if onTimeout != nil {
				onTimeout()
			}
		}
	})
}

const requestTimeout = 5 * time.Second

// toJob routes a job command as the runtime does: to the job's actor while it runs, else to
// the dispatcher.
func toJob(jobID string) func(*server) actors.Ref {
	return func(v *server) actors.Ref {
		if v.rt.Bound(actors.JobRef(jobID)) != nil {
			return actors.JobRef(jobID)
		}
		return actors.DispatcherRef()
	}
}

func toRef(r actors.Ref) func(*server) actors.Ref { return func(*server) actors.Ref { return r } }

// checkReply checks an answer as it leaves server process v: whatever it acknowledges is
// durable.
func (s *Sim) checkReply(v *server, party string, msg, reply any) {
	receipt := func(rc actors.Receipt) {
		if rc.Seq > v.synced.Seq {
			s.fail("durability", "%s got a receipt for seq %d, but only seq %d is durable", party, rc.Seq, v.synced.Seq)
			return
		}
		if rc.Hash != "" {
			if r, err := v.log.Get(rc.Seq); err != nil || r.Hash.String() != rc.Hash {
				s.fail("durability", "%s got receipt %d/%s, which is not in the log (%v)", party, rc.Seq, rc.Hash, err)
			}
		}
	}
	switch r := reply.(type) {
	case actors.Submitted:
		if r.Err != nil {
			return
		}
		tenant := msg.(actors.Submit).Tenant
		for _, j := range r.Jobs {
			if j.IdempotentHit && s.oracle.hasExpired(j.ID) {
				continue // the key outlives the job it named
			}
			if got := v.set.JobRef(j.ID); got == nil || got.Tenant != tenant {
				s.fail("durability", "%s was told job %s is accepted before it was durable", party, j.ID)
				return
			}
		}
		receipt(r.Receipt)
	case actors.FlowAccepted:
		if r.Err != nil {
			return
		}
		if of := s.oracle.flows[r.FlowID]; r.IdempotentHit && of != nil && of.expired {
			receipt(r.Receipt) // the key outlives the flow it named
			return
		}
		if f, ok := v.set.Flow(r.FlowID); !ok || f.Tenant != msg.(actors.SubmitFlow).Tenant {
			s.fail("durability", "%s was told flow %s is accepted before it was durable", party, r.FlowID)
			return
		}
		receipt(r.Receipt)
	case actors.ScheduleMade:
		if r.Err != nil {
			return
		}
		if c, ok := v.set.Schedule(r.ID); !ok || c.Tenant != msg.(actors.CreateSchedule).Tenant {
			s.fail("durability", "%s was told schedule %s exists before it was durable", party, r.ID)
			return
		}
		receipt(r.Receipt)
	case actors.Done:
		if r.Err == nil {
			receipt(r.Receipt)
		}
	case actors.Reserved:
		if r.Err == nil {
			receipt(r.Receipt)
		}
	case actors.PurgeDone:
		if r.Err == nil && r.Purged > 0 {
			receipt(r.Receipt)
		}
	case actors.ProgressAck:
		if r.Err == nil {
			receipt(r.Receipt)
		}
	}
}
