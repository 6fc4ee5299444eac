package transport

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/fastjson"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/flowfile"
	"github.com/tetherhq/tether/transport/tracing"
	"github.com/tetherhq/tether/transport/wire"
)

// flowTypes are the media types a flow file may come as; JSON is YAML too.
var flowTypes = []string{"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "application/json"}

// flowBody admits a flow file (one of flowTypes) or a multipart form with it, where jsonBody
// admits only JSON. A form is what a page of another site can post without asking; checkSite
// refuses those (Sec-Fetch-Site, and under --auth none the Origin), and under --auth token the
// form cannot carry the key.
func flowBody(r *http.Request) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil && (slices.Contains(flowTypes, mt) || mt == "multipart/form-data") {
		return nil
	}
	return errorf(wire.CodeUnsupportedMedia, "send the flow file as application/yaml (or application/json), or as the part \"file\" of a multipart/form-data body")
}

func (s *Server) flowBytesMax() int {
	if s.cfg.FlowBytesMax > 0 {
		return s.cfg.FlowBytesMax
	}
	return flowfile.BytesMaxDefault
}

// flowFormBytes is the room a multipart body has around its file.
const flowFormBytes = 16 << 10

// readFlowFile reads the flow file of a submit and the name the form gives, if any.
func (s *Server) readFlowFile(r *request) (data []byte, formName string, err error) {
	limit := s.flowBytesMax()
	tooBig := func() error {
		e := errorf(actors.CodePayloadTooLarge, "the flow file is over %d bytes", limit)
		e.details = map[string]any{"limit": limit}
		return e
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		data, err = io.ReadAll(http.MaxBytesReader(r.w, r.Body, int64(limit)))
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, "", tooBig()
		}
		return data, "", err
	}
	mr := multipart.NewReader(http.MaxBytesReader(r.w, r.Body, int64(limit+flowFormBytes)), params["boundary"])
	found := false
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			if !found {
				return nil, "", errorf(actors.CodeInvalidArgument, `the form has no part "file" with the flow file`)
			}
			return data, formName, nil
		}
		if err == nil {
			switch p.FormName() {
			case "file":
				if found {
					return nil, "", errorf(actors.CodeInvalidArgument, `the form has two parts "file"; send one flow file`)
				}
				data, err = io.ReadAll(io.LimitReader(p, int64(limit)+1))
				found = true
			case "flow_name":
				var b []byte
				b, err = io.ReadAll(io.LimitReader(p, actors.FlowNameLenMax+1))
				formName = strings.TrimSpace(string(b))
			default:
				return nil, "", errorf(actors.CodeInvalidArgument, "unknown form part %q; the form takes file and flow_name", clip(p.FormName()))
			}
		}
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe) || len(data) > limit:
			return nil, "", tooBig()
		case err != nil:
			return nil, "", errorf(actors.CodeInvalidArgument, "the multipart body cannot be read: %v", err)
		}
	}
}

// submitFlow serves POST /v1/flows?name=NAME.
func (s *Server) submitFlow(r *request) error {
	data, formName, err := s.readFlowFile(r)
	if err != nil {
		return err
	}
	if err := fastjson.CheckUTF8(data); err != nil {
		return errorf(wire.CodeInvalidJSON, "the flow file %v", err)
	}
	file, err := flowfile.Parse(data)
	if err != nil {
		var fe *flowfile.Error
		if errors.As(err, &fe) {
			e := errorf(actors.CodeInvalidFlow, "%s", fe.Error())
			e.details = map[string]any{"path": fe.Path, "line": fe.Line, "column": fe.Column}
			return e
		}
		return err
	}
	name := cmp.Or(r.URL.Query().Get("name"), formName, file.Name)
	if name == "" {
		return errorf(actors.CodeInvalidArgument, "a flow needs a name: ?name=, the form's flow_name, or flow.name in the file")
	}
	key := cmp.Or(r.Header.Get(IdempotencyKeyHeader), r.URL.Query().Get("idempotency_key"))
	sum := sha256.Sum256(data)
	tp, span := s.startSubmit(r, "tether.submit_flow")
	id, hit, rc, err := r.b.SubmitFlow(r.Context(), actors.SubmitFlow{
		Tenant: r.by.tenant, Name: name, Steps: file.Steps, YAMLSHA256: hex.EncodeToString(sum[:]), YAMLBytes: len(data),
		IdempotencyKey: key, APIKeyID: r.by.apiKeyID, Traceparent: tp,
	})
	if err != nil {
		span.End(err)
		return err
	}
	span.SetString(tracing.AttrFlowID, id)
	span.SetInt(tracing.AttrSeq, int64(rc.Seq))
	span.End(nil)
	f, ok := flowOf(r.b, r.by.tenant, id)
	switch {
	case !ok && hit: // the key outlives the flow it made, which ended and left the views
		f = wire.Flow{ID: id, Tenant: r.by.tenant, Name: name, Status: wire.FlowExpired, Steps: map[string]wire.FlowStep{}}
	case !ok:
		return errorf(actors.CodeUnavailable, "flow %s was accepted and is not in the views; the server is stopping", id)
	}
	f.Receipt, f.IdempotentHit = new(receipt(rc)), &hit
	status := http.StatusCreated
	if hit {
		status = http.StatusOK
	}
	return r.reply(status, f)
}

// flowOf reads a tenant's flow as the wire has it.
func flowOf(b Core, tenant, id string) (wire.Flow, bool) {
	var f *projections.Flow
	b.Read(func(s *projections.Set) {
		if x, ok := s.Flow(id); ok && x.Tenant == tenant {
			f = x
		}
	})
	if f == nil {
		return wire.Flow{}, false
	}
	return wireFlow(f), true
}

func wireFlow(f *projections.Flow) wire.Flow {
	out := wire.Flow{
		ID: f.ID, Tenant: f.Tenant, Name: f.Name, Status: string(f.Status), FailedStep: f.FailedStep,
		YAMLSHA256: f.YAMLSHA256, YAMLBytes: f.YAMLBytes, Steps: make(map[string]wire.FlowStep, len(f.Steps)),
		CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt,
	}
	if !f.EndedAt.IsZero() {
		out.EndedAt = new(f.EndedAt)
	}
	for _, st := range f.Steps {
		state := f.State[st.Name]
		needs := st.Needs
		if needs == nil {
			needs = []string{}
		}
		step := wire.FlowStep{JobID: state.JobID, Status: state.Status, Queue: st.Queue, Type: st.Type,
			Needs: needs, ContinueOnFailure: st.ContinueOnFailure}
		if state.Status == projections.StepWaiting {
			for _, n := range st.Needs {
				if s := f.State[n].Status; s != projections.StepSkipped && !projections.Status(s).Terminal() {
					step.WaitingFor = append(step.WaitingFor, n)
				}
			}
		}
		out.Steps[st.Name] = step
	}
	return out
}

func flowNotFound(id string) error { return errorf(actors.CodeFlowNotFound, "no flow %q", clip(id)) }

func (s *Server) getFlow(r *request) error {
	f, ok := flowOf(r.b, r.by.tenant, r.PathValue("id"))
	if !ok {
		return flowNotFound(r.PathValue("id"))
	}
	return r.reply(http.StatusOK, f)
}

func (s *Server) listFlows(r *request) error {
	q := r.URL.Query()
	status := projections.FlowStatus(q.Get("status"))
	switch status {
	case "", projections.FlowRunning, projections.FlowSucceeded, projections.FlowFailed, projections.FlowCancelled:
	default:
		return errorf(actors.CodeInvalidArgument, "status is running, succeeded, failed or cancelled, not %q", clip(string(status)))
	}
	if err := checkCursor(q.Get("cursor")); err != nil {
		return err
	}
	limit, err := listLimit(q)
	if err != nil {
		return err
	}
	var flows []*projections.Flow
	var more bool
	r.b.Read(func(s *projections.Set) { flows, more = s.Flows(r.by.tenant, status, q.Get("cursor"), limit) })
	out := wire.FlowList{Flows: make([]wire.Flow, len(flows))}
	for i, f := range flows {
		out.Flows[i] = wireFlow(f)
	}
	if more {
		out.NextCursor = flows[len(flows)-1].ID
	}
	return r.reply(http.StatusOK, out)
}

func (s *Server) cancelFlow(r *request) error {
	id := r.PathValue("id")
	if _, ok := flowOf(r.b, r.by.tenant, id); !ok {
		return flowNotFound(id)
	}
	rc, err := r.b.CancelFlow(r.Context(), r.by.tenant, r.by.apiKeyID, id)
	if err != nil {
		return err
	}
	f, _ := flowOf(r.b, r.by.tenant, id)
	f.Receipt = new(receipt(rc))
	return r.reply(http.StatusOK, f)
}

// flowCursor walks a flow's event stream, which the broker reads (broker.FlowEvents: the
// flow's own stream and its steps' jobs', merged in log order), numbering its events from 1 in
// that order.
type flowCursor struct {
	flowID string
	number int
	seq    uint64
}

// next reads up to EventsPageMax events of each stream after the cursor, skipping those
// numbered skipTo or below, and moves the cursor past what it read. moved says it read
// something, sent or skipped, so the reader reads again at once; ended, that the flow and its
// steps' jobs have ended, so a read that did not move has reached the end for good. It reads
// no further than the projections have folded (cursor.next says why); here it also keeps a
// step's job that a record past them made from being read from after its first events.
func (c *flowCursor) next(b Core, tenant string, skipTo int) (out []wire.Event, moved, ended bool, err error) {
	var f *projections.Flow
	var upTo uint64
	b.Read(func(s *projections.Set) {
		if x, ok := s.Flow(c.flowID); ok && x.Tenant == tenant {
			f, upTo = x, s.Seq()
		}
	})
	if f == nil {
		return nil, false, true, nil
	}
	recs, err := b.FlowEvents(f, c.seq+1, EventsPageMax)
	if err != nil {
		return nil, false, false, err
	}
	recs = slices.DeleteFunc(recs, func(rec eventlog.Record) bool { return rec.Seq > upTo })
	for _, rec := range recs {
		c.number++
		c.seq = rec.Seq
		if c.number > skipTo {
			out = append(out, wire.Event{Number: c.number, Seq: rec.Seq, Time: rec.Time, Type: rec.Type, Data: json.RawMessage(rec.Data)})
		}
	}
	return out, len(recs) > 0, !f.Live(), nil
}

// flowEvents serves GET /v1/flows/{id}/events as jobEvents does a job's: SSE when asked for,
// else one JSON page; Last-Event-ID (or ?after=N) resumes after event N, and a final `event:
// done` follows the flow's end once its steps' jobs have all finished.
func (s *Server) flowEvents(r *request) error {
	id := r.PathValue("id")
	if _, ok := flowOf(r.b, r.by.tenant, id); !ok {
		return flowNotFound(id)
	}
	after, err := resumeAfter(r)
	if err != nil {
		return err
	}
	c := &flowCursor{flowID: id}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		var all []wire.Event
		for len(all) < EventsPageMax {
			evs, moved, ended, err := c.next(r.b, r.by.tenant, after)
			if err != nil {
				return err
			}
			all = append(all, evs...)
			if !moved {
				if all == nil {
					all = []wire.Event{}
				}
				return r.reply(http.StatusOK, wire.EventList{Events: all, Done: ended})
			}
		}
		return r.reply(http.StatusOK, wire.EventList{Events: all})
	}
	return s.serveStream(r, func() ([]wire.Event, bool, string, error) {
		evs, moved, ended, err := c.next(r.b, r.by.tenant, after)
		switch {
		case err != nil || moved:
			return evs, moved, "", err
		case ended:
			f, _ := flowOf(r.b, r.by.tenant, id)
			return nil, false, f.Status, nil
		}
		return nil, false, "", nil
	})
}
