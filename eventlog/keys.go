package eventlog

import (
	"encoding/binary"
	"fmt"
)

// Key prefixes; doc.go draws the layout.
const (
	prefixLog  = "log/"
	prefixIdx  = "idx/"
	prefixCkpt = "ckpt/"
	prefixView = "view/"
	// prefixViewEnd is the exclusive upper bound of every view key ('0' is the byte after '/').
	prefixViewEnd = "view0"
	keyFormat     = "meta/format"

	// formatMarker is the value of keyFormat: it tells a tether log from any other Pebble store.
	formatMarker = "tether.eventlog.v1"
)

// logKey returns "log/" + seq as 8 big-endian bytes, so keys sort in seq order.
func logKey(seq uint64) []byte {
	k := make([]byte, len(prefixLog)+8)
	putLogKey(k, seq)
	return k
}

func putLogKey(dst []byte, seq uint64) {
	copy(dst, prefixLog)
	binary.BigEndian.PutUint64(dst[len(prefixLog):], seq)
}

// logKeySeq parses a key made by logKey.
func logKeySeq(k []byte) (uint64, error) {
	if len(k) != len(prefixLog)+8 || string(k[:len(prefixLog)]) != prefixLog {
		return 0, fmt.Errorf("%w: malformed log key %q", ErrCorruptRecord, k)
	}
	return binary.BigEndian.Uint64(k[len(prefixLog):]), nil
}

// logKeyEnd is the exclusive upper bound of every log key.
var logKeyEnd = []byte("log0") // '0' is the byte after '/'

// idxKeyEnd is the exclusive upper bound of every index key.
var idxKeyEnd = []byte("idx0")

// streamName is a stream's name in two parts written one after the other, head then tail: an
// appended event of a job's stream names it by its job ("job/", id; Event.job), so that an
// append does not build the name's string. Any other name is its head alone (nameOf).
type streamName struct{ head, tail string }

func nameOf(stream string) streamName { return streamName{head: stream} }

func (s streamName) len() int { return len(s.head) + len(s.tail) }

// put writes the name at the start of dst and returns its length.
func (s streamName) put(dst []byte) int {
	n := copy(dst, s.head)
	return n + copy(dst[n:], s.tail)
}

// idxKeyLen is the length of the index key for a stream.
func idxKeyLen(stream streamName) int { return len(prefixIdx) + stream.len() + 1 + 8 }

// putIdxKey writes "idx/" + stream + 0x00 + seq (8 bytes big-endian). The NUL separator keeps
// one stream's keys from interleaving with a stream whose name extends it ("job/a" vs "job/ab");
// stream names may not contain NUL.
func putIdxKey(dst []byte, stream streamName, seq uint64) {
	n := copy(dst, prefixIdx)
	n += stream.put(dst[n:])
	dst[n] = 0
	binary.BigEndian.PutUint64(dst[n+1:], seq)
}

func idxKey(stream string, seq uint64) []byte {
	k := make([]byte, idxKeyLen(nameOf(stream)))
	putIdxKey(k, nameOf(stream), seq)
	return k
}

// idxKeySeq returns the seq at the end of an index key.
func idxKeySeq(k []byte) uint64 { return binary.BigEndian.Uint64(k[len(k)-8:]) }

// ckptKey returns "ckpt/" + name.
func ckptKey(name string) []byte { return []byte(prefixCkpt + name) }
