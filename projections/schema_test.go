package projections

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/tetherhq/tether/eventlog/schematest"
)

// Every field of a job is written by the table's encoder byte for byte as json.Marshal writes
// it, without reflection, and read back by its decoder as json.Unmarshal reads it, without
// reflection: each field alone and all at once. A field added to Job without a case in
// encode.go fails here, naming it. (schematest says why this is a reflection test.)
func TestEveryJobFieldIsEncoded(t *testing.T) {
	rt := reflect.TypeFor[Job]()
	check := func(what string, v reflect.Value) {
		t.Helper()
		j := v.Interface().(*Job)
		want, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendJob(nil, j)
		if !ok || !bytes.Equal(got, want) {
			t.Errorf("a job with %s set: appendJob wrote %s (without reflection: %v)\njson.Marshal writes %s", what, got, ok, want)
		}
		read, ok := scanJob(want)
		back := &Job{}
		if err := json.Unmarshal(want, back); err != nil || !ok || !reflect.DeepEqual(read, back) {
			t.Errorf("a job with %s set: %s\nscanJob read %+v (without reflection: %v)\njson.Unmarshal reads %+v, %v", what, want, read, ok, back, err)
		}
	}
	check("every field", schematest.Full(rt))
	for _, f := range schematest.Fields(rt) {
		check(f.Path+" ("+f.JSON+")", schematest.New(rt, f))
	}
}

// randomJob, which the encoder's and decoder's tests draw from, sets every field of a job now
// and then.
func TestRandomJobSetsEveryField(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	jobs := make([]*Job, 1000)
	for i := range jobs {
		jobs[i] = randomJob(r)
	}
	schematest.CheckSet(t, "randomJob", jobs)
}
