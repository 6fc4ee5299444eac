package frames

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/tetherhq/tether/transport/wire"
)

// The encoder's bytes are json.Marshal's, frame after frame, including a large frame that makes
// it drop its buffer and a frame that cannot be encoded.
func TestEncoderMatchesMarshal(t *testing.T) {
	at := time.Date(2026, 11, 22, 1, 2, 3, 4, time.UTC)
	ok := true
	frames := []wire.Frame{
		{Type: wire.FrameAssign, JobID: "j1", LeaseID: "l1", Nonce: "n", Payload: json.RawMessage(`{"a": [1, 2], "html": "<&>"}`), LeaseExpiresAt: &at},
		{Type: wire.FrameAck, Ref: "7", OK: &ok, Receipt: &wire.Receipt{Seq: 9, Hash: "ab"}},
		{Type: wire.FrameAssign, Payload: json.RawMessage(`"` + string(bytes.Repeat([]byte("x"), 2*keepMax)) + `"`)},
		{Type: wire.FrameCancel, JobID: "j2", LeaseID: "l2"},
	}
	var e Encoder
	for i, f := range frames {
		got, err := e.Encode(f)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(f)
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %s, want %s", i, got, want)
		}
	}
	if _, err := e.Encode(wire.Frame{Type: wire.FrameAssign, Payload: json.RawMessage(`{`)}); err == nil {
		t.Fatal("a frame with a payload that is not JSON was encoded")
	}
	if got, _ := e.Encode(frames[3]); !bytes.Contains(got, []byte(`"j2"`)) {
		t.Fatalf("after a failed frame: %s", got)
	}
}
