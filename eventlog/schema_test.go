package eventlog_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/schematest"
)

// Every field of every event decodes as encoding/json decodes it, and, for the events the
// decoder without reflection takes (those it reads "{}" for), by that decoder: a field added to
// one of them without a case in decode.go's scanPayload fails here, naming it. Each event is
// tried with every field set, and with each field set alone. (schematest says why this is a
// reflection test and not generated code.)
func TestEveryFieldDecodes(t *testing.T) {
	t.Parallel()
	for _, p := range eventlog.Catalogue() {
		typ, rt := p.EventType(), reflect.TypeOf(p)
		_, fast := eventlog.ScanPayload(typ, []byte(`{}`))
		fields := schematest.Fields(rt)
		check := func(what string, v reflect.Value) {
			t.Helper()
			b, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatalf("%s with %s: %v", typ, what, err)
			}
			got, err := eventlog.Decode(typ, b)
			want, werr := eventlog.UnmarshalPayload(typ, b)
			again, _ := json.Marshal(got) // nothing lost: the decoded event encodes as it was
			if err != nil || werr != nil || !reflect.DeepEqual(got, want) || string(again) != string(b) {
				t.Errorf("%s with %s set: %s\nDecode = %#v, %v\nencoding/json = %#v, %v", typ, what, b, got, err, want, werr)
			}
			if _, ok := eventlog.ScanPayload(typ, b); fast && !ok {
				t.Errorf("%s with %s set: %s\nthe decoder without reflection (decode.go's scanPayload) does not read it, and leaves the event to encoding/json", typ, what, b)
			}
		}
		check("every field", schematest.Full(rt))
		for _, f := range fields {
			check(f.Path+" ("+f.JSON+")", schematest.New(rt, f))
		}
	}
}

// Every field of the events the encoder without reflection takes (encode.go's appendPayload)
// encodes as json.Marshal encodes it: a field added to one of them without a line there fails
// here, naming it.
func TestEveryFieldEncodes(t *testing.T) {
	t.Parallel()
	taken := 0
	for _, p := range eventlog.Catalogue() {
		typ, rt := p.EventType(), reflect.TypeOf(p)
		if _, fast := eventlog.AppendPayload(nil, p); !fast {
			continue
		}
		taken++
		check := func(what string, v reflect.Value) {
			t.Helper()
			want, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatalf("%s with %s: %v", typ, what, err)
			}
			got, ok := eventlog.AppendPayload(nil, reflect.Indirect(v).Interface().(eventlog.Payload))
			if !ok || string(got) != string(want) {
				t.Errorf("%s with %s set:\nappendPayload %s (taken: %v)\njson.Marshal  %s", typ, what, got, ok, want)
			}
		}
		check("every field", schematest.Full(rt))
		for _, f := range schematest.Fields(rt) {
			check(f.Path+" ("+f.JSON+")", schematest.New(rt, f))
		}
	}
	if taken != 3 {
		t.Fatalf("appendPayload takes %d event types, want 3 (job.submitted, job.leased, job.succeeded)", taken)
	}
}
