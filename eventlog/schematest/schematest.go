// Package schematest walks the fields of the structs that hand-written codecs encode (the event
// catalogue, the job table's rows, the API's job resource and submit body, the worker
// protocol's frames) and builds values of them with a field set, so that a test can hold each
// codec to encoding/json field by field, and check that a random generator sets every field.
//
// Why a reflection test and not generated codecs: the codecs are short and tuned by hand. Each
// leaves some fields to encoding/json on purpose (a float, a rare frame, a failed job's error)
// and gives up on values it cannot write byte for byte, choices a generator would need
// annotations for, and generated code with a staleness check is more to keep than the few
// hundred lines it replaces. A test over the real structs needs no tooling, names the field a
// codec lacks, and also catches the random generators that never set a field, which generation
// would not.
//
// A field is a leaf of the struct's tree: a scalar, a string, a time, raw JSON, a list or map
// of scalars, or a pointer to one of those. Nested structs, pointers to structs and slices of
// structs are walked into (an embedded struct's fields are the embedding struct's in JSON).
package schematest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Field is one leaf field of a struct type.
type Field struct {
	// Path names the field from the root in Go: "Steps[].JobTemplate.Queue".
	Path string
	// JSON names it as encoding/json does: "steps[].queue".
	JSON string
	// Name is the leaf's own Go name, the last part of Path.
	Name  string
	index []int // the struct field index at each level
	n     int   // the leaf's ordinal, which makes its sample differ from every other leaf's
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// Fields returns every leaf field of the struct type t, in the struct's order.
func Fields(t reflect.Type) []Field {
	var out []Field
	var walk func(t reflect.Type, index []int, path, jpath string)
	walk = func(t reflect.Type, index []int, path, jpath string) {
		for i := range t.NumField() {
			sf := t.Field(i)
			if !sf.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			idx := append(append([]int(nil), index...), i)
			p := path + sf.Name
			jp := jpath + name
			if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
				jp = jpath // an embedded struct's fields are its embedder's in JSON
			}
			if inner, suffix, ok := nested(sf.Type); ok {
				if jp != jpath {
					jp += suffix + "."
				}
				walk(inner, idx, p+suffix+".", jp)
				continue
			}
			out = append(out, Field{Path: p, JSON: jp, Name: sf.Name, index: idx, n: len(out)})
		}
	}
	walk(t, nil, "", "")
	return out
}

// nested reports the struct a field of type t holds fields of (itself, or the element of a
// pointer or slice), and how a path names the step into it.
func nested(t reflect.Type) (reflect.Type, string, bool) {
	switch {
	case t.Kind() == reflect.Struct && t != timeType:
		return t, "", true
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct && t.Elem() != timeType:
		return t.Elem(), "", true
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && t.Elem() != timeType:
		return t.Elem(), "[]", true
	}
	return nil, "", false
}

// New returns a pointer to a new value of the struct type t with only f set.
func New(t reflect.Type, f Field) reflect.Value {
	v := reflect.New(t)
	Set(v.Elem(), f)
	return v
}

// Full returns a pointer to a new value of the struct type t with every field set.
func Full(t reflect.Type) reflect.Value {
	v := reflect.New(t)
	for _, f := range Fields(t) {
		Set(v.Elem(), f)
	}
	return v
}

// Set sets f in the struct value v (addressable) to a sample of its type, making the pointers
// and slices on its way (one element), or using those already there.
func Set(v reflect.Value, f Field) {
	for i, fi := range f.index {
		v = v.Field(fi)
		if i == len(f.index)-1 {
			v.Set(sample(v.Type(), f))
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		case reflect.Slice:
			if v.Len() == 0 {
				v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			}
			v = v.Index(0)
		}
	}
}

// IsSet reports whether f is set (not its type's zero) in the struct value v: in any element,
// where it is in a slice.
func IsSet(v reflect.Value, f Field) bool {
	var at func(v reflect.Value, index []int) bool
	at = func(v reflect.Value, index []int) bool {
		v = v.Field(index[0])
		if len(index) == 1 {
			return !v.IsZero()
		}
		switch v.Kind() {
		case reflect.Pointer:
			return !v.IsNil() && at(v.Elem(), index[1:])
		case reflect.Slice:
			for i := range v.Len() {
				if at(v.Index(i), index[1:]) {
					return true
				}
			}
			return false
		}
		return at(v, index[1:])
	}
	return at(reflect.Indirect(v), f.index)
}

// Unset returns the paths of the fields of T's struct type (T a struct or a pointer to one)
// that none of values sets.
func Unset[T any](values []T) []string {
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	vs := make([]reflect.Value, len(values))
	for i := range values {
		vs[i] = reflect.ValueOf(values[i])
	}
	return UnsetOf(t, vs)
}

// CheckSet fails t for the fields of T that none of values sets, saying that what never sets
// them: a random generator or a fuzzer's seeds that would leave a field untested.
func CheckSet[T any](t testing.TB, what string, values []T) {
	t.Helper()
	if unset := Unset(values); len(unset) > 0 {
		t.Errorf("%s never sets %v", what, unset)
	}
}

// UnsetOf returns the paths of the fields of the struct type t that none of values (values of
// t, or pointers to them) sets.
func UnsetOf(t reflect.Type, values []reflect.Value) []string {
	var out []string
	for _, f := range Fields(t) {
		set := false
		for _, v := range values {
			if v = reflect.Indirect(v); v.IsValid() && v.Type() == t && IsSet(v, f) {
				set = true
				break
			}
		}
		if !set {
			out = append(out, f.Path)
		}
	}
	return out
}

// sample returns a value of t that is not its zero, and differs from every other leaf's, so a
// codec that writes one field under another's name is caught: a string is the field's Go name,
// a number counts from the leaf's ordinal, a time is seconds apart.
func sample(t reflect.Type, f Field) reflect.Value {
	n := f.n + 1
	v := reflect.New(t).Elem()
	switch {
	case t == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 11, 26, 1, 2, 3, 450_000_000, time.UTC).Add(time.Duration(n) * time.Second)))
	case t == rawType:
		v.SetBytes([]byte(fmt.Sprintf(`{"%s":[%d,"x"]}`, f.Name, n)))
	case t.Kind() == reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
		v.Elem().Set(sample(t.Elem(), f))
	case t.Kind() == reflect.String:
		v.SetString(f.Name)
	case t.Kind() == reflect.Bool:
		v.SetBool(true)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		v.SetInt(int64(1000 + n))
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		v.SetUint(uint64(1000 + n))
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		v.SetFloat(float64(n) + 0.5)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		v.Set(reflect.MakeSlice(t, 2, 2))
		v.Index(0).SetString(f.Name)
		v.Index(1).SetString("b")
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		v.Set(reflect.MakeMap(t))
		e := reflect.New(t.Elem()).Elem()
		switch t.Elem().Kind() {
		case reflect.String:
			e.SetString(f.Name)
		case reflect.Interface:
			e.Set(reflect.ValueOf(f.Name))
		default:
			panic(fmt.Sprintf("schematest: %s is a map of %s, which has no sample yet", f.Path, t.Elem()))
		}
		v.SetMapIndex(reflect.ValueOf("k").Convert(t.Key()), e)
	default:
		panic(fmt.Sprintf("schematest: %s is of type %s, which has no sample yet", f.Path, t))
	}
	return v
}
