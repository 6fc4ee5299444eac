package report

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/projections/audit"
)

func TestThousands(t *testing.T) {
	for n, want := range map[uint64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// A whole log verified says so in one line, then what it holds, counts in a fixed order.
func TestVerifyOfAWholeLog(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	got := Verify(audit.Summary{Records: 1234, Streams: 3, HeadSeq: 1234, HeadHash: "ab", FirstTime: at, LastTime: at.Add(time.Second),
		Jobs: map[projections.Status]int{projections.StatusSucceeded: 2}, Types: map[string]uint64{"JobSubmitted": 2, "JobLeased": 2}, CheckpointSeq: 1000})
	for _, want := range []string{
		"verified   1,234 records; chain, index and projections hold\n",
		"jobs       queued 0, scheduled 0, leased 0, succeeded 2, failed 0, cancelled 0\n",
		"events     JobLeased 2, JobSubmitted 2\n",
		"time span  2026-01-02T03:04:05Z .. 2026-01-02T03:04:06Z (1s)\n",
		"checkpoint seq 1000 equals the replay up to it\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in\n%s", want, got)
		}
	}
}

func TestFailedNamesTheSeq(t *testing.T) {
	if got := Failed(errors.New("bad")).Error(); got != "FAILED: bad" {
		t.Fatalf("%q", got)
	}
}
