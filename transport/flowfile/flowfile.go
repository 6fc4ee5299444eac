// Package flowfile reads a flow file (docs/design.md §9): YAML whose one top-level key is `flow`,
//
//	flow:
//	  name: nightly            # optional; the submit's name wins
//	  defaults: {queue: demo, max_attempts: 3}
//	  steps:
//	    fetch:  {type: fetch, payload: {url: "..."}}
//	    train:  {type: train, needs: [fetch]}
//
// into the steps a tenant checks (actors.FlowStepSpec). The schema is strict: an unknown key is
// refused with its path and line, as are the keys `flows` and `discovery`, which other tools
// put in such files and which mean nothing here. A value takes the JSON API's types exactly:
// strings are strings (a quoted "true" or "1" too), a whole number is one (1.5 is refused, not
// cut to 1), and a boolean is true or false, unquoted (not YAML 1.1's yes, no, on or off). What makes a flow valid beyond its shape
// (needs that exist and form no cycle, each step a valid job) is the tenant's to check.
package flowfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/fastjson"
	"github.com/tetherhq/tether/transport/wire"
)

// BytesMaxDefault caps a flow file unless the server is told otherwise.
const BytesMaxDefault = 262_144

// Error is a flow file that cannot be read: Path names the key ("flow.steps.train.needs"),
// Line and Column where it is (1-based; 0 if unknown).
type Error struct {
	Path    string
	Line    int
	Column  int
	Message string
}

func (e *Error) Error() string {
	where := e.Path
	if e.Line > 0 {
		where = fmt.Sprintf("%s (line %d, column %d)", e.Path, e.Line, e.Column)
	}
	if where == "" {
		return e.Message
	}
	return where + ": " + e.Message
}

// File is a flow file read.
type File struct {
	Name  string // flow.name, if the file has one
	Steps []actors.FlowStepSpec
}

// forbidden are top-level keys other workflow tools use, refused by name so that a file meant
// for one of them fails clearly here.
var forbidden = map[string]string{
	"flows":     `a file holds one flow, under "flow"`,
	"discovery": "tether does not discover steps; list them under flow.steps",
}

// Parse reads a flow file.
func Parse(data []byte) (File, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return File{}, &Error{Message: `the file is empty; it needs a top-level "flow" key`}
	} else if err != nil {
		return File{}, yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return File{}, &Error{Line: extra.Line, Column: extra.Column, Message: "the file holds more than one YAML document"}
	}
	if len(doc.Content) == 0 {
		return File{}, &Error{Message: `the file is empty; it needs a top-level "flow" key`}
	}
	top := doc.Content[0]
	var flow *yaml.Node
	err := fields(top, "", func(key string, k, v *yaml.Node) error {
		if why, ok := forbidden[key]; ok {
			return at(k, key, "the key %q is not allowed: %s", key, why)
		}
		if key != "flow" {
			return at(k, key, `unknown key %q; the file's one top-level key is "flow"`, key)
		}
		flow = v
		return nil
	})
	if err != nil {
		return File{}, err
	}
	if flow == nil {
		return File{}, at(top, "", `the file has no top-level "flow" key`)
	}
	var f File
	var defaults stepFields
	var steps *yaml.Node
	err = fields(flow, "flow", func(key string, k, v *yaml.Node) error {
		switch key {
		case "name":
			return scalar(v, "flow.name", &f.Name)
		case "defaults":
			return defaults.read(v, "flow.defaults", false)
		case "steps":
			steps = v
			return nil
		}
		return at(k, "flow."+key, "unknown key %q; flow takes name, defaults and steps", key)
	})
	if err != nil {
		return File{}, err
	}
	if steps == nil {
		return File{}, at(flow, "flow", `the flow has no "steps"`)
	}
	err = fields(steps, "flow.steps", func(name string, k, v *yaml.Node) error {
		path := "flow.steps." + name
		if len(f.Steps) >= actors.FlowStepsMax {
			return at(k, path, "a flow has at most %d steps", actors.FlowStepsMax)
		}
		s := defaults.clone()
		if err := s.read(v, path, true); err != nil {
			return err
		}
		spec, err := s.spec(name)
		if err != nil {
			return at(v, path, "%v", err)
		}
		f.Steps = append(f.Steps, spec)
		return nil
	})
	if err != nil {
		return File{}, err
	}
	if len(f.Steps) == 0 {
		return File{}, at(steps, "flow.steps", "the flow has no steps")
	}
	return f, nil
}

// stepFields are a step's keys (or the defaults'), as read so far.
type stepFields struct {
	queue, typ        string
	payload           json.RawMessage
	priority          int
	maxAttempts       int
	leaseTTL          float64
	labels            map[string]string
	concurrencyKey    string
	rateLimits        []eventlog.RateLimitUse
	needs             []string
	continueOnFailure bool
}

func (s stepFields) clone() stepFields {
	c := s
	c.labels = maps.Clone(s.labels)
	return c
}

// read takes the keys of a step's mapping (or the defaults', which take no needs, payload or
// continue_on_failure). A step's labels add to the defaults'.
func (s *stepFields) read(n *yaml.Node, path string, step bool) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" && step {
		return nil // "report:" alone: a step with the defaults only
	}
	return fields(n, path, func(key string, k, v *yaml.Node) error {
		p := path + "." + key
		switch key {
		case "queue":
			return scalar(v, p, &s.queue)
		case "type":
			return scalar(v, p, &s.typ)
		case "priority":
			return scalar(v, p, &s.priority)
		case "max_attempts":
			return scalar(v, p, &s.maxAttempts)
		case "lease_ttl_seconds":
			return scalar(v, p, &s.leaseTTL)
		case "concurrency_key":
			return scalar(v, p, &s.concurrencyKey)
		case "rate_limits":
			return rateLimits(v, p, &s.rateLimits)
		case "labels":
			l := map[string]string{}
			err := fields(v, p, func(name string, _, value *yaml.Node) error {
				var label string
				err := scalar(value, p+"."+name, &label)
				l[name] = label
				return err
			})
			if err != nil {
				return err
			}
			if s.labels == nil {
				s.labels = map[string]string{}
			}
			maps.Copy(s.labels, l)
			return nil
		}
		if !step {
			return at(k, p, "unknown key %q; defaults take queue, type, priority, max_attempts, lease_ttl_seconds, labels, concurrency_key and rate_limits", key)
		}
		switch key {
		case "payload":
			b, err := appendJSON(nil, v, p, 0)
			if err != nil {
				return err
			}
			if err := fastjson.Check(b, wire.JSONDepthMax-1); err != nil { // as deep as a submit's payload
				return at(v, p, "the payload %v", err)
			}
			s.payload = b
			return nil
		case "needs":
			if v.Kind != yaml.SequenceNode {
				return at(v, p, "needs is a list of step names, as in needs: [fetch]")
			}
			s.needs = nil
			for _, item := range v.Content {
				var n string
				if err := scalar(item, p, &n); err != nil {
					return err
				}
				s.needs = append(s.needs, n)
			}
			return nil
		case "continue_on_failure":
			return scalar(v, p, &s.continueOnFailure)
		}
		return at(k, p, "unknown key %q; a step takes queue, type, payload, priority, max_attempts, lease_ttl_seconds, labels, concurrency_key, rate_limits, needs and continue_on_failure", key)
	})
}

// spec is the step as a job; its type is its name unless set.
func (s stepFields) spec(name string) (actors.FlowStepSpec, error) {
	typ := s.typ
	if typ == "" {
		typ = name
	}
	if s.leaseTTL < 0 || s.leaseTTL > actors.LeaseTTLMax.Seconds() || math.IsNaN(s.leaseTTL) {
		return actors.FlowStepSpec{}, fmt.Errorf("lease_ttl_seconds %s is outside %v..%v (0: the default)",
			strconv.FormatFloat(s.leaseTTL, 'f', -1, 64), actors.LeaseTTLMin.Seconds(), actors.LeaseTTLMax.Seconds())
	}
	return actors.FlowStepSpec{
		Name: name,
		Job: actors.JobSpec{
			Queue: s.queue, Type: typ, Payload: s.payload, Priority: s.priority, MaxAttempts: s.maxAttempts,
			LeaseTTL: time.Duration(s.leaseTTL * float64(time.Second)), Labels: s.labels, ConcurrencyKey: s.concurrencyKey,
			RateLimits: s.rateLimits,
		},
		Needs: s.needs, ContinueOnFailure: s.continueOnFailure,
	}, nil
}

// fields calls fn for each key of a mapping, in the file's order, and refuses a key given twice.
func fields(n *yaml.Node, path string, fn func(key string, k, v *yaml.Node) error) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		what := path
		if what == "" {
			what = "the file"
		}
		return at(n, path, "%s must be a mapping of keys to values", what)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return at(k, path, "a key must be a plain name")
		}
		key := k.Value
		if k.Tag == "!!merge" {
			return at(k, path, "merge keys (<<) are not supported; write the keys out")
		}
		if seen[key] {
			return at(k, join(path, key), "the key %q is given twice", key)
		}
		seen[key] = true
		if err := fn(key, k, v); err != nil {
			return err
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// scalar decodes a scalar into v, with an error that names what was expected. It takes what the
// JSON API takes for v's type (jsonTyped), and null, which leaves v as JSON's null does.
func scalar[T any](n *yaml.Node, path string, v *T) error {
	if n.Kind != yaml.ScalarNode {
		return at(n, path, "must be %s, not %s", kindOf(v), nodeKind(n))
	}
	if n.ShortTag() != "!!null" && !jsonTyped(n, v) {
		written := n.Value
		if n.ShortTag() == "!!str" {
			written = fmt.Sprintf("the string %q", n.Value)
		}
		return at(n, path, "must be %s, not %s", kindOf(v), written)
	}
	if err := n.Decode(v); err != nil {
		return at(n, path, "must be %s, not %q", kindOf(v), n.Value)
	}
	return nil
}

// jsonTyped says whether a scalar is of v's type as the JSON API reads it: a YAML string for a
// string, and for the others an unquoted literal that JSON reads as that type, so that 017,
// 0x10, .nan and True are not numbers or booleans here either.
func jsonTyped(n *yaml.Node, v any) bool {
	tag := n.ShortTag()
	if _, ok := v.(*string); ok {
		return tag == "!!str"
	}
	literal := n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 && json.Valid([]byte(n.Value))
	switch v.(type) {
	case *int:
		return literal && tag == "!!int"
	case *float64:
		return literal && (tag == "!!int" || tag == "!!float")
	case *bool:
		return literal && tag == "!!bool"
	}
	return false
}

func kindOf(v any) string {
	switch v.(type) {
	case *string:
		return "a string"
	case *int:
		return "a whole number"
	case *float64:
		return "a number"
	case *bool:
		return "true or false"
	}
	return "a value"
}

// nodeKind names what a node that is not a scalar is.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

// appendJSON appends the JSON of a payload's YAML node n. A number keeps the text it was
// written with when that is a JSON number, so that the payload reads as the JSON API's would:
// 123456789012345678901234567890 stays exact (the YAML library makes it a float64), and 1e999
// is refused by the check that refuses it in a JSON body (the library makes it the string
// "1e999"); a YAML-only form (0x1F, 1_000, .5) is converted. A date stays the text it was
// written as. Mapping keys must be strings; aliases and merge keys (<<) are followed, within
// the largest payload a submit takes: every node writes a byte at least, so a file of aliases
// of aliases (a "billion laughs") is refused once its expansion passes it, not built.
func appendJSON(b []byte, n *yaml.Node, path string, depth int) ([]byte, error) {
	if depth > wire.JSONDepthMax {
		return nil, at(n, path, "the payload is nested deeper than %d", wire.JSONDepthMax)
	}
	if len(b) > actors.DefaultPayloadBytesMax {
		return nil, at(n, path, "the payload, its aliases expanded, is larger than %d bytes of JSON", actors.DefaultPayloadBytesMax)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 1 {
			return appendJSON(b, n.Content[0], path, depth)
		}
	case yaml.AliasNode:
		return appendJSON(b, n.Alias, path, depth+1)
	case yaml.SequenceNode:
		b = append(b, '[')
		for i, item := range n.Content {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, item, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case yaml.MappingNode:
		pairs, err := mappingPairs(n, path, map[string]bool{}, false)
		if err != nil {
			return nil, err
		}
		b = append(b, '{')
		for i, kv := range pairs {
			if i > 0 {
				b = append(b, ',')
			}
			b, _ = appendString(b, kv[0].Value)
			b = append(b, ':')
			if b, err = appendJSON(b, kv[1], path+"."+kv[0].Value, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case yaml.ScalarNode:
		return appendScalar(b, n, path)
	}
	return nil, at(n, path, "the payload must be JSON-shaped")
}

// mappingPairs are a mapping's key and value nodes, a merge key's (<<) mappings' after its own
// keys unless they name them; seen holds the keys taken so far, merged whether n is merged in.
func mappingPairs(n *yaml.Node, path string, seen map[string]bool, merged bool) ([][2]*yaml.Node, error) {
	var pairs [][2]*yaml.Node
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.ShortTag() == "!!merge":
			merges = append(merges, v)
		case k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str":
			return nil, at(k, path, "the payload must be JSON-shaped: its keys are strings (quote %s)", k.Value)
		case seen[k.Value] && merged: // the mapping's own key wins
		case seen[k.Value]:
			return nil, at(k, path, "the payload has the key %q twice", k.Value)
		default:
			seen[k.Value] = true
			pairs = append(pairs, [2]*yaml.Node{k, v})
		}
	}
	for _, m := range merges {
		for m.Kind == yaml.AliasNode {
			m = m.Alias
		}
		from := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			from = m.Content
		}
		for _, f := range from {
			for f.Kind == yaml.AliasNode {
				f = f.Alias
			}
			if f.Kind != yaml.MappingNode {
				return nil, at(f, path, "a merge key (<<) takes a mapping or a list of them")
			}
			more, err := mappingPairs(f, path, seen, true)
			if err != nil {
				return nil, err
			}
			pairs = append(pairs, more...)
		}
	}
	return pairs, nil
}

// appendScalar appends the JSON of a scalar of a payload.
func appendScalar(b []byte, n *yaml.Node, path string) ([]byte, error) {
	switch n.ShortTag() {
	case "!!null":
		return append(b, "null"...), nil
	case "!!bool":
		var v bool
		if err := n.Decode(&v); err != nil {
			return nil, at(n, path, "%v", err)
		}
		return strconv.AppendBool(b, v), nil
	case "!!int", "!!float":
		if isJSONNumber(n.Value) {
			return append(b, n.Value...), nil
		}
		var v float64
		if err := n.Decode(&v); err != nil {
			return nil, at(n, path, "%v", err)
		}
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, at(n, path, "the payload has %s, which JSON has no number for (I-JSON, RFC 7493)", n.Value)
		}
		return strconv.AppendFloat(b, v, 'g', -1, 64), nil
	case "!!str", "!!timestamp", "!!binary":
		if n.Style == 0 && n.ShortTag() == "!!str" && isJSONNumber(n.Value) {
			// A number the YAML library could not hold (1e999): the JSON body's check says why.
			return append(b, n.Value...), nil
		}
		out, ok := appendString(b, n.Value)
		if !ok {
			return nil, at(n, path, "the payload has a string that is not UTF-8 (a lone surrogate?)")
		}
		return out, nil
	}
	return nil, at(n, path, "the payload must be JSON-shaped, not %s", n.ShortTag())
}

// isJSONNumber says whether s is written as a JSON number.
func isJSONNumber(s string) bool {
	return s != "" && (s[0] == '-' || '0' <= s[0] && s[0] <= '9') && json.Valid([]byte(s))
}

// appendString appends s as a JSON string; false if s is not UTF-8.
func appendString(b []byte, s string) ([]byte, bool) {
	if !utf8.ValidString(s) {
		return b, false
	}
	q, _ := json.Marshal(s)
	return append(b, q...), true
}

func at(n *yaml.Node, path, format string, args ...any) *Error {
	return &Error{Path: path, Line: n.Line, Column: n.Column, Message: fmt.Sprintf(format, args...)}
}

// yamlError turns the YAML library's error into an Error with the line it names.
func yamlError(err error) error {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) {
		msg = strings.Join(te.Errors, "; ")
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	line := 0
	if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr == nil {
		msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
	}
	return &Error{Line: line, Message: "not valid YAML: " + msg}
}

// rateLimits reads a step's rate limits: a list whose items name a limit ("api") or a limit
// and its bucket's key ({name: api, key: team-1}).
func rateLimits(v *yaml.Node, p string, dst *[]eventlog.RateLimitUse) error {
	if v.Kind != yaml.SequenceNode {
		return at(v, p, "rate_limits is a list of limits, as in rate_limits: [api, {name: gpu, key: a100}]")
	}
	out := []eventlog.RateLimitUse{}
	for _, item := range v.Content {
		var u eventlog.RateLimitUse
		if item.Kind == yaml.ScalarNode {
			if err := scalar(item, p, &u.Name); err != nil {
				return err
			}
		} else if err := fields(item, p, func(key string, k, value *yaml.Node) error {
			switch key {
			case "name":
				return scalar(value, p+".name", &u.Name)
			case "key":
				return scalar(value, p+".key", &u.Key)
			}
			return at(k, p, "unknown key %q; a rate limit takes name and key", key)
		}); err != nil {
			return err
		}
		out = append(out, u)
	}
	*dst = out
	return nil
}
