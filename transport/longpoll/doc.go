// Package longpoll is the long-poll offer protocol as one state machine with no I/O: the HTTP
// handler (transport/poll.go) and the simulator (sim/poll.go) both drive it, so the simulator
// proves the rules production runs.
//
// A poll offers the worker's free slots to its session (actors.Offer) and waits. The shell
// feeds it what happens (Step) and does what it returns (Actions); the machine reads no clock,
// starts no timer and sends nothing itself. Its rules, which are docs/design.md §5's "capacity is
// an offer that holds only while someone is there to take it":
//
//  1. Credit lasts exactly as long as the poll waits. When the wait ends, for any reason (an
//     assignment came, the wait is over, the client went away), the poll withdraws its offer
//     (Actions.Withdraw) and then takes every assignment the offer brought, up to the session's
//     OfferEnded; it answers only then. A poll never ends with its offer still standing.
//  2. An assignment that does not reach the worker goes back to the queue at once, with no
//     attempt spent (Actions.HandBack, which the shell turns into actors.Undelivered): one that
//     came for a client that went away, one past the offer's size, one that arrives after the
//     answer, and an answer the shell could not deliver (ClientGone after Answered).
//  3. A session that ends ends the poll: what it brought is answered (the worker's next session
//     adopts the leases), or handed back if nobody waits for it.
//  4. A withdrawal whose OfferEnded does not come in time (OfferEndOverdue) closes the session
//     (Actions.CloseSession), whose later assignments then go back by rule 2.
//
// The states run Offering → Waiting → Withdrawing → Answered | Done; every input is defined in
// every state (the table test walks them all).
package longpoll
