package frames

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

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

// A frame read earlier keeps its payload when the next frame reuses the buffer, and a frame over
// the connection's read limit is the connection's error.
func TestReaderReusesItsBufferSafely(t *testing.T) {
	sent := []string{
		`{"type":"assign","job_id":"j1","payload":{"first":"` + strings.Repeat("a", 100) + `"}}`,
		`{"type":"assign","job_id":"j2","payload":{"second":"` + strings.Repeat("b", 100) + `"}}`,
		`{"type":"assign","payload":"` + strings.Repeat("c", 2000) + `"}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for _, m := range sent {
			if c.WriteMessage(websocket.TextMessage, []byte(m)) != nil {
				return
			}
		}
		_, _, _ = c.ReadMessage() // until the client goes
	}))
	defer srv.Close()
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var r Reader
	var first, second wire.Frame
	if err := r.Read(conn, &first); err != nil {
		t.Fatal(err)
	}
	if err := r.Read(conn, &second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(first.Payload), `"first"`) || first.JobID != "j1" || !strings.Contains(string(second.Payload), `"second"`) {
		t.Fatalf("first %s %s, second %s", first.JobID, first.Payload, second.Payload)
	}
	conn.SetReadLimit(1000)
	if err := r.Read(conn, &second); !errors.Is(err, websocket.ErrReadLimit) {
		t.Fatalf("a frame over the limit: %v", err)
	}
}
