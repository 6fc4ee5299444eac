// Package frames reads and writes worker-protocol frames on a WebSocket connection through
// buffers kept per connection, for the server and the Go client alike. ReadMessage and
// json.Marshal allocate a buffer per frame, the largest share of the bytes a job allocated.
// The frames every job sends are encoded and decoded without reflection (codec.go), to the
// same bytes and values as encoding/json, a connection's recurring names (frame types, queues,
// job types) to strings it keeps. A connection's read and write deadlines move at most once a
// second (IdleDeadline, Cork), not once a frame.
package frames

import (
	"bytes"
	"encoding/json"

	"github.com/gorilla/websocket"

	"github.com/tetherhq/tether/transport/wire"
)

// keepMax is the most buffer a connection keeps between frames: a rare large frame (an output
// near its limit) does not pin its size to the connection.
const keepMax = 64 << 10

// Reader reads the frames of one connection; it is not safe for concurrent use.
type Reader struct {
	// Check, if set, is given each frame before it is decoded, and its error is Read's: the
	// server holds what workers send to the rules of the API's bodies.
	Check func(data []byte) error
	buf   bytes.Buffer
	names names // the connection's queues and job types
}

// Read reads the next message into f. Errors are the connection's (websocket.ErrReadLimit for
// an oversize frame), the decoder's (*json.SyntaxError, *json.UnmarshalTypeError) or Check's.
func (r *Reader) Read(conn *websocket.Conn, f *wire.Frame) error {
	_, rd, err := conn.NextReader()
	if err != nil {
		return err
	}
	defer r.trim()
	r.buf.Reset()
	if _, err := r.buf.ReadFrom(rd); err != nil {
		return err
	}
	if r.Check != nil {
		if err := r.Check(r.buf.Bytes()); err != nil {
			return err
		}
	}
	return decode(r.buf.Bytes(), f, &r.names)
}

// decode decodes a frame as json.Unmarshal does into a zero Frame, keeping nothing of data, a
// name in names to the string kept for it.
func decode(data []byte, f *wire.Frame, names *names) error {
	*f = wire.Frame{}
	if decodeFast(data, f, names) {
		return nil
	}
	*f = wire.Frame{}
	// Unmarshal copies what it keeps (strings, json.RawMessage), so data can be reused.
	return json.Unmarshal(data, f)
}

func (r *Reader) trim() {
	if r.buf.Cap() > keepMax {
		r.buf = bytes.Buffer{}
	}
}

// Encoder encodes the frames of one connection; it is not safe for concurrent use.
type Encoder struct {
	fast  []byte // what appendFast wrote
	buf   bytes.Buffer
	enc   *json.Encoder
	frame wire.Frame // what Encode encodes: a pointer to it boxes without allocating
}

// Encode returns f as JSON, escaped as json.Marshal escapes it. The bytes are valid until the
// next Encode.
func (e *Encoder) Encode(f wire.Frame) ([]byte, error) {
	if e.fast == nil || cap(e.fast) > keepMax {
		e.fast = make([]byte, 0, 512)
	}
	if b, ok := appendFast(e.fast[:0], &f); ok {
		e.fast = b
		return b, nil
	}
	if e.enc == nil || e.buf.Cap() > keepMax {
		e.buf = bytes.Buffer{}
		e.enc = json.NewEncoder(&e.buf)
	}
	e.buf.Reset()
	e.frame = f
	err := e.enc.Encode(&e.frame)
	e.frame = wire.Frame{} // keeps nothing of f alive
	if err != nil {
		return nil, err
	}
	data := e.buf.Bytes()
	return data[:len(data)-1], nil // without the newline Encode ends with
}
