package projections_test

import (
	"testing"
	"time"

	"github.com/tetherhq/tether/projections"
)

// A changed limit keeps the tokens its buckets hold, up to the new burst, and they refill at
// the new rate: raising the rate speeds up an empty bucket at once, lowering it does not
// refill one, a bigger burst does not fill one, a smaller burst caps what is there.
func TestConvertBucketKeepsTheTokens(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	lim := func(rate float64, burst int) projections.RateLimit {
		return projections.RateLimit{Rate: rate, Burst: burst}
	}
	for _, c := range []struct {
		name     string
		full     time.Time // the bucket under the old limit
		from, to projections.RateLimit
		want     time.Duration // full again this long after at; 0: full now
	}{
		{"empty, rate raised", at.Add(10 * time.Second), lim(0.1, 1), lim(2, 1), 500 * time.Millisecond},
		{"a day away, rate raised", at.Add(24 * time.Hour), lim(1.0/86400, 1), lim(100, 1), 10 * time.Millisecond},
		{"empty, rate lowered", at.Add(time.Second), lim(10, 10), lim(1, 10), 10 * time.Second},
		{"7 of 10 tokens, rate lowered", at.Add(300 * time.Millisecond), lim(10, 10), lim(1, 10), 3 * time.Second},
		{"one token short, burst raised", at.Add(10 * time.Second), lim(0.1, 1), lim(0.1, 10), 100 * time.Second},
		{"half a token, burst lowered", at.Add(95 * time.Second), lim(0.1, 10), lim(0.1, 1), 5 * time.Second},
		{"9 of 10, burst lowered to 5", at.Add(time.Second), lim(1, 10), lim(1, 5), 0},
		{"full", at, lim(1, 3), lim(5, 1), 0},
		{"full, burst raised: it holds the old burst", at, lim(2, 2), lim(2, 20), 9 * time.Second},
		{"full, rate raised (and with it a default burst)", at.Add(-time.Minute), lim(2, 2), lim(10, 10), 800 * time.Millisecond},
		{"full long ago", at.Add(-time.Hour), lim(1, 3), lim(5, 1), 0},
	} {
		got, ok := projections.ConvertBucket(c.full, at, c.from, c.to)
		if c.want == 0 {
			if ok {
				t.Errorf("%s: full at %s, want full now", c.name, got.Sub(at))
			}
			continue
		}
		if !ok || got.Sub(at) != c.want {
			t.Errorf("%s: full again in %s (%v), want %s", c.name, got.Sub(at), ok, c.want)
		}
	}
}
