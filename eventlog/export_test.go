package eventlog

// UnmarshalPayload is Decode by encoding/json alone, which the fast path must agree with.
var UnmarshalPayload = unmarshalPayload

// ScanPayload is Decode's path without reflection.
var ScanPayload = scanPayload

// KeySpan is the span policy the store's tables are cut by.
var KeySpan = keySpan

// Flush flushes the memtable to a table, as Pebble does when it fills.
func (l *Log) Flush() error { return l.db.Flush() }

// TableBounds returns the first and last user key of every table of the store.
func (l *Log) TableBounds() ([][2][]byte, error) {
	levels, err := l.db.SSTables()
	if err != nil {
		return nil, err
	}
	var out [][2][]byte
	for _, level := range levels {
		for _, t := range level {
			out = append(out, [2][]byte{t.Smallest.UserKey, t.Largest.UserKey})
		}
	}
	return out, nil
}

// AppendPayload is NewEvent's encoder without reflection.
var AppendPayload = appendPayload
