package bench

import "testing"

func TestHasJobID(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"id":"01KAR7ZQ6J3N6WQH1V9X8Y7Z6A","tenant":"default"}`, true},
		{"\n {\"id\":\"x\"}", true},
		{`{"id":"","tenant":"default"}`, false},
		{`{"id":"`, false},
		{`{"tenant":"default","id":"x"}`, false},
		{`{"error":{"code":"QUOTA_EXCEEDED"}}`, false},
		{``, false},
	} {
		if got := hasJobID([]byte(c.body)); got != c.want {
			t.Errorf("hasJobID(%q) = %v, want %v", c.body, got, c.want)
		}
	}
}
