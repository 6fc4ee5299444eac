package eventlog

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"
	"unicode/utf8"
)

// Record is one entry of the log: an Event as it was sequenced, stamped and chained.
type Record struct {
	Seq    uint64    // global position, gap-free from 1
	Time   time.Time // the server clock when the record was sequenced, UTC, never decreasing
	Stream string    // "job/<id>", "worker/<id>", "tenant/<name>"
	Type   string    // an event type from the catalogue, e.g. "job.submitted"
	Data   []byte    // the payload, JSON
	Hash   Hash      // SHA-256(previous record's Hash || encoded body), see doc.go
}

// Hash is a link of the chain: a SHA-256 digest.
type Hash [sha256.Size]byte

// String returns the hash as lowercase hex, the form used in receipts and exports.
func (h Hash) String() string {
	var digits [2 * len(h)]byte // on the stack: a receipt's hash costs only the string
	hex.Encode(digits[:], h[:])
	return string(digits[:])
}

// MarshalText writes the hash as its hex digits, as String does, so that JSON shows it so.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// Genesis is the hash the first record chains from: SHA-256 of the ASCII string
// "tether/eventlog/genesis/v1".
var Genesis = Hash(sha256.Sum256([]byte("tether/eventlog/genesis/v1")))

// Limits on a single event. They bound what one append can make the committer hold.
const (
	StreamLenMax = 256     // bytes of a stream name
	TypeLenMax   = 128     // bytes of an event type
	DataLenMax   = 4 << 20 // bytes of an event's JSON payload
)

// Layout of an encoded record (format version 1). All integers are big-endian.
const (
	recordVersion = 1

	offVersion   = 0
	offSeq       = 1
	offTime      = 9
	offStreamLen = 17
	offTypeLen   = 19
	offDataLen   = 21
	headerLen    = 25
	hashLen      = sha256.Size
)

// encodedLen is the size of the encoded record for an event, hash included.
func encodedLen(stream streamName, typ string, data []byte) int {
	return headerLen + stream.len() + len(typ) + len(data) + hashLen
}

// encodeRecord writes the record into dst, which must be exactly encodedLen bytes, computes its
// hash from prev and stores it in the last 32 bytes. It returns the hash.
func encodeRecord(dst []byte, prev Hash, seq uint64, unixNano int64, stream streamName, typ string, data []byte) Hash {
	n := putBody(dst, seq, unixNano, stream, typ, data)
	h := chainHash(prev, dst[:n])
	copy(dst[n:], h[:])
	return h
}

// putBody writes everything but the hash and returns its length.
func putBody(dst []byte, seq uint64, unixNano int64, stream streamName, typ string, data []byte) int {
	dst[offVersion] = recordVersion
	binary.BigEndian.PutUint64(dst[offSeq:], seq)
	binary.BigEndian.PutUint64(dst[offTime:], uint64(unixNano))
	binary.BigEndian.PutUint16(dst[offStreamLen:], uint16(stream.len()))
	binary.BigEndian.PutUint16(dst[offTypeLen:], uint16(len(typ)))
	binary.BigEndian.PutUint32(dst[offDataLen:], uint32(len(data)))
	n := headerLen
	n += stream.put(dst[n:])
	n += copy(dst[n:], typ)
	n += copy(dst[n:], data)
	return n
}

// chainHash is the chain's link function: SHA-256(prev || body).
func chainHash(prev Hash, body []byte) Hash {
	d := sha256.New()
	d.Write(prev[:])
	d.Write(body)
	var h Hash
	d.Sum(h[:0])
	return h
}

// DecodeRecord parses an encoded record. It checks the structure (version, lengths, limits,
// UTF-8 names) but not the chain: use Verify, or ChainsFrom, for that. Data is a copy, so the
// input buffer may be reused.
func DecodeRecord(b []byte) (Record, error) {
	if len(b) < headerLen+hashLen {
		return Record{}, fmt.Errorf("%w: %d bytes is shorter than the minimum %d", ErrCorruptRecord, len(b), headerLen+hashLen)
	}
	if b[offVersion] != recordVersion {
		return Record{}, fmt.Errorf("%w: unknown format version %d", ErrCorruptRecord, b[offVersion])
	}
	streamLen := int(binary.BigEndian.Uint16(b[offStreamLen:]))
	typeLen := int(binary.BigEndian.Uint16(b[offTypeLen:]))
	dataLen := int(binary.BigEndian.Uint32(b[offDataLen:]))
	if streamLen == 0 || streamLen > StreamLenMax || typeLen == 0 || typeLen > TypeLenMax || dataLen > DataLenMax {
		return Record{}, fmt.Errorf("%w: field lengths out of range (stream %d, type %d, data %d)", ErrCorruptRecord, streamLen, typeLen, dataLen)
	}
	if want := headerLen + streamLen + typeLen + dataLen + hashLen; len(b) != want {
		return Record{}, fmt.Errorf("%w: length %d, header says %d", ErrCorruptRecord, len(b), want)
	}
	n := headerLen
	stream := string(b[n : n+streamLen])
	n += streamLen
	typ := string(b[n : n+typeLen])
	n += typeLen
	if !utf8.ValidString(stream) || !utf8.ValidString(typ) {
		return Record{}, fmt.Errorf("%w: stream or type is not UTF-8", ErrCorruptRecord)
	}
	r := Record{
		Seq:    binary.BigEndian.Uint64(b[offSeq:]),
		Time:   time.Unix(0, int64(binary.BigEndian.Uint64(b[offTime:]))).UTC(),
		Stream: stream,
		Type:   typ,
		Data:   append([]byte(nil), b[n:n+dataLen]...),
	}
	if r.Seq == 0 {
		return Record{}, fmt.Errorf("%w: seq 0", ErrCorruptRecord)
	}
	copy(r.Hash[:], b[len(b)-hashLen:])
	return r, nil
}

// Encode returns the record's encoded bytes with the hash it carries (not a recomputed one).
// It is the inverse of DecodeRecord, used by tools that export and re-verify records.
func (r Record) Encode() []byte {
	b := make([]byte, encodedLen(nameOf(r.Stream), r.Type, r.Data))
	n := putBody(b, r.Seq, r.Time.UnixNano(), nameOf(r.Stream), r.Type, r.Data)
	copy(b[n:], r.Hash[:])
	return b
}

// ChainsFrom reports whether the record's hash is the link from prev over its own body.
func (r Record) ChainsFrom(prev Hash) bool {
	b := r.Encode()
	return chainHash(prev, b[:len(b)-hashLen]) == r.Hash
}
