package actors

import (
	"strings"
	"testing"
)

// A submit's labels are checked without sorting their keys, and a refusal names the first bad
// key in order every time, whatever order the map gives them in.
func TestCheckLabelsNamesTheFirstBadKey(t *testing.T) {
	labels := map[string]string{"ok": "1", "z bad": "x", "b bad": "y", "fine": strings.Repeat("v", LabelValueLenMax+1), "a": "2"}
	for range 50 {
		r := checkLabels(labels)
		if r == nil || !strings.Contains(r.Message, `"b bad"`) {
			t.Fatalf("checkLabels = %v; want the refusal to name %q", r, "b bad")
		}
	}
	good := map[string]string{"team": "ml", "env": "prod"}
	if r := checkLabels(good); r != nil {
		t.Fatalf("checkLabels(%v) = %v", good, r)
	}
	if n := testing.AllocsPerRun(100, func() { _ = checkLabels(good) }); n != 0 {
		t.Fatalf("checking good labels makes %v allocations; want 0", n)
	}
}
