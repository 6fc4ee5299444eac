package transport

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/actors"
)

// Every sentence explain makes with a count in it agrees with the count: one job goes, two go;
// one lease is "that lease", two are "one of them".
func TestExplainMessagesAgreeWithTheirCounts(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	soon := now.Add(3 * time.Second)
	for _, tc := range []struct {
		x    actors.Explanation
		want string
	}{
		{actors.Explanation{Code: actors.ExplainRateLimited, RateLimit: "r", Rate: 1, Burst: 1, TokenAt: soon, Ahead: 1},
			"rate limit r (1 a second, burst 1) has no token in its bucket, and 1 job of the same limits goes first: its token is due at 2026-01-01T00:00:03Z (in 3s) at the earliest"},
		{actors.Explanation{Code: actors.ExplainRateLimited, RateLimit: "r", Rate: 1, Burst: 1, TokenAt: soon, Ahead: 2},
			"rate limit r (1 a second, burst 1) has no token in its bucket, and 2 jobs of the same limits go first: its token is due at 2026-01-01T00:00:03Z (in 3s) at the earliest"},
		{actors.Explanation{Code: actors.ExplainWorkersBusy, Queue: "q", Sessions: 1, Capacity: 1, Held: 1, Ahead: 1},
			"the 1 worker connection serving queue q has no room or no credit (1 lease held of a capacity of 1); 1 job of the queue goes before it"},
		{actors.Explanation{Code: actors.ExplainWorkersBusy, Queue: "q", Sessions: 2, Capacity: 2, Held: 2, Ahead: 1, AheadAtLeast: true},
			"the 2 worker connections serving queue q have no room or no credit (2 leases held of a capacity of 2); at least 1 job of the queue goes before it"},
		{actors.Explanation{Code: actors.ExplainWorkersBusy, Queue: "q", Sessions: 1, Capacity: 1, Held: 1, Ahead: 0},
			"the 1 worker connection serving queue q has no room or no credit (1 lease held of a capacity of 1); 0 jobs of the queue go before it"},
		{actors.Explanation{Code: actors.ExplainBehind, Queue: "q", Ahead: 1},
			"1 job of queue q goes before it (priority, then keys in turn, then age); a worker has room"},
		{actors.Explanation{Code: actors.ExplainBehind, Queue: "q", Ahead: 3},
			"3 jobs of queue q go before it (priority, then keys in turn, then age); a worker has room"},
		{actors.Explanation{Code: actors.ExplainTenantQuota, Running: 1, MaxRunning: 1},
			"the tenant runs 1 job, and its max_running is 1: it goes once that job ends"},
		{actors.Explanation{Code: actors.ExplainTenantQuota, Running: 2, MaxRunning: 2},
			"the tenant runs 2 jobs, and its max_running is 2: it goes once one of them ends"},
		{actors.Explanation{Code: actors.ExplainTenantQuota, Running: 3, MaxRunning: 1},
			"the tenant runs 3 jobs, and its max_running is 1: it goes once 3 of them end"},
		{actors.Explanation{Code: actors.ExplainKeyLimit, Queue: "q", Key: "k", KeyLimit: 1, KeyHolders: []string{"J1"}},
			`its concurrency key "k" holds 1 lease (job J1), and its max_running_per_key in queue q is 1: it goes once that lease ends`},
		{actors.Explanation{Code: actors.ExplainKeyLimit, Queue: "q", Key: "k", KeyLimit: 2, KeyHolders: []string{"J1", "J2"}},
			`its concurrency key "k" holds 2 leases (jobs J1, J2), and its max_running_per_key in queue q is 2: it goes once one of them ends`},
	} {
		if got := explanationOf(tc.x, now).Message; got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.x.Code, got, tc.want)
		}
	}
}
