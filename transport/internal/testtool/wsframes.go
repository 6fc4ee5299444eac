package testtool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// WSFrame is one WebSocket frame as it was on the wire, unmasked.
type WSFrame struct {
	Fin     bool
	Opcode  byte
	Payload []byte
}

// WebSocket opcodes (RFC 6455 §5.2).
const (
	OpText  = 0x1
	OpClose = 0x8
	OpPing  = 0x9
	OpPong  = 0xA
)

// ParseWSFrames parses the bytes one side of a WebSocket connection sent after the handshake,
// as strictly as a browser reads a server (RFC 6455 §5): no reserved bits (no extension is
// negotiated), known opcodes only, masked exactly when the client sent them, control frames
// unfragmented and at most 125 bytes, lengths in their shortest form, no continuation without a
// message to continue, and text messages valid UTF-8. It returns the whole frames and the bytes
// of an incomplete last frame, or the first violation.
func ParseWSFrames(b []byte, fromClient bool) (frames []WSFrame, rest []byte, err error) {
	inMessage, text := false, false
	var message []byte
	for len(b) > 0 {
		if len(b) < 2 {
			return frames, b, nil
		}
		b0, b1 := b[0], b[1]
		f := WSFrame{Fin: b0&0x80 != 0, Opcode: b0 & 0x0f}
		if b0&0x70 != 0 {
			return frames, nil, fmt.Errorf("frame %d: reserved bits set (%#x)", len(frames), b0)
		}
		if masked := b1&0x80 != 0; masked != fromClient {
			return frames, nil, fmt.Errorf("frame %d: masked=%v from the %s", len(frames), masked, side(fromClient))
		}
		n, head := uint64(b1&0x7f), 2
		switch n {
		case 126:
			if len(b) < 4 {
				return frames, b, nil
			}
			n, head = uint64(binary.BigEndian.Uint16(b[2:])), 4
			if n < 126 {
				return frames, nil, fmt.Errorf("frame %d: a length of %d in the 16-bit form", len(frames), n)
			}
		case 127:
			if len(b) < 10 {
				return frames, b, nil
			}
			n, head = binary.BigEndian.Uint64(b[2:]), 10
			if n < 1<<16 || n>>63 != 0 {
				return frames, nil, fmt.Errorf("frame %d: a length of %d in the 64-bit form", len(frames), n)
			}
		}
		var key []byte
		if fromClient {
			if len(b) < head+4 {
				return frames, b, nil
			}
			key, head = b[head:head+4], head+4
		}
		if uint64(len(b)-head) < n {
			return frames, b, nil
		}
		f.Payload = append([]byte(nil), b[head:head+int(n)]...)
		for i := range f.Payload {
			if key != nil {
				f.Payload[i] ^= key[i%4]
			}
		}
		switch f.Opcode {
		case OpClose, OpPing, OpPong:
			if !f.Fin || n > 125 {
				return frames, nil, fmt.Errorf("frame %d: control frame %#x fragmented or %d bytes", len(frames), f.Opcode, n)
			}
			if f.Opcode == OpClose && n == 1 {
				return frames, nil, fmt.Errorf("frame %d: a close frame of one byte", len(frames))
			}
		case OpText, 0x2:
			if inMessage {
				return frames, nil, fmt.Errorf("frame %d: a new message inside a fragmented one", len(frames))
			}
			inMessage, text, message = !f.Fin, f.Opcode == OpText, append(message[:0], f.Payload...)
		case 0x0:
			if !inMessage {
				return frames, nil, errors.New("a continuation frame with no message to continue")
			}
			message = append(message, f.Payload...)
			inMessage = !f.Fin
		default:
			return frames, nil, fmt.Errorf("frame %d: unknown opcode %#x", len(frames), f.Opcode)
		}
		if f.Opcode < OpClose && f.Fin && text && !utf8.Valid(message) {
			return frames, nil, fmt.Errorf("frame %d: text that is not UTF-8", len(frames))
		}
		frames = append(frames, f)
		b = b[head+int(n):]
	}
	return frames, nil, nil
}

func side(fromClient bool) string {
	if fromClient {
		return "client"
	}
	return "server"
}
