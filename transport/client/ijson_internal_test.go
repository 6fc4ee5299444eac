package client

import (
	"encoding/json"
	"strings"
	"testing"
)

// An output or event data that is not I-JSON (a number past a double's range, a lone
// surrogate), which the server refuses, is refused before it is sent, naming where it is.
func TestOutputThatIsNotIJSONIsNotSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  any
		want string
	}{
		{"a number past a double", json.RawMessage(`{"x":[1e999]}`), "the output has the number 1e999 at x[0]"},
		{"a lone surrogate", json.RawMessage(`{"s":"\udc00"}`), `the output has a lone surrogate \udc00 in the string at s`},
		{"a pair", json.RawMessage(`{"s":"\ud83d\ude00"}`), ""},
	} {
		_, err := outputOf(tc.out)
		if (err == nil) != (tc.want == "") || err != nil && !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	j := &Job{ID: "j", LeaseID: "l"} // no runner: an event that reached it would panic
	if err := j.Event(t.Context(), "progress", json.RawMessage(`{"pct":-1e400}`)); err == nil || !strings.HasPrefix(err.Error(), `the event's data has the number -1e400 at pct`) {
		t.Errorf("an event's data past a double: %v", err)
	}
}
