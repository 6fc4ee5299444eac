package transport

import (
	"testing"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/eventlog"
)

// Every reason a session ends with in the log has its own close code and text, and a reason
// without one closes normally, saying what it is, not that a newer connection took over.
func TestEveryEndHasACloseCode(t *testing.T) {
	for _, reason := range eventlog.SessionEndReasons() {
		if _, ok := sessionCloses[reason]; !ok {
			t.Errorf("session end reason %q has no close code in sessionCloses", reason)
		}
	}
	if len(sessionCloses) != len(eventlog.SessionEndReasons()) {
		t.Errorf("sessionCloses has %d rows for %d reasons", len(sessionCloses), len(eventlog.SessionEndReasons()))
	}
	if code, text := closeCodeOf("not_a_reason"); code != websocket.CloseNormalClosure || text != "the session ended: not_a_reason" {
		t.Errorf("an unknown reason closes with %d %q", code, text)
	}
	for _, text := range sessionCloses {
		if len(text.text) > 123 { // RFC 6455: a close frame's payload is at most 125 bytes
			t.Errorf("close text %q is too long for a close frame", text.text)
		}
	}
}
