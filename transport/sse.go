package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/wire"
)

// Event streams.
const (
	// KeepAliveInterval is how often an idle event stream sends a comment, so proxies and NAT
	// paths keep it open.
	KeepAliveInterval = 15 * time.Second
	// EventsPageMax caps the events one JSON answer or one read of the log holds.
	EventsPageMax      = 1000
	streamWriteTimeout = 30 * time.Second
)

// cursor walks one job's stream: the number and seq of the last event read.
type cursor struct {
	jobID  string
	number int
	seq    uint64
}

// next reads up to EventsPageMax events after the cursor and up to seq upTo, skipping those
// numbered skipTo or below (a resume), and moves the cursor past what it read. upTo is the job's
// last seq as the projections have it: the log makes a record durable a moment before the
// projections fold it, and a watcher that read an event before a read of the job showed it
// would see the job go back (its lease expired in the stream, and leased still on GET).
func (c *cursor) next(b Core, skipTo int, upTo uint64) ([]wire.Event, error) {
	var out []wire.Event
	for rec, err := range b.JobStream(c.jobID, c.seq+1) {
		if err != nil {
			return out, err
		}
		if rec.Seq > upTo {
			break
		}
		c.number++
		c.seq = rec.Seq
		if c.number <= skipTo {
			continue
		}
		out = append(out, wire.Event{Number: c.number, Seq: rec.Seq, Time: rec.Time, Type: rec.Type, Data: json.RawMessage(rec.Data)})
		if len(out) == EventsPageMax {
			break
		}
	}
	return out, nil
}

// jobState reads what a watcher needs to know of a job without copying it.
func jobState(b Core, tenant, id string) (lastSeq uint64, status projections.Status, ok bool) {
	b.PeekJob(id, func(j *projections.Job) {
		if j.Tenant == tenant {
			lastSeq, status, ok = j.LastSeq, j.Status, true
		}
	})
	return
}

// jobEvents serves GET /v1/jobs/{id}/events: SSE when the client accepts text/event-stream,
// else one JSON page. Last-Event-ID (or ?after=N) resumes after event N.
func (s *Server) jobEvents(r *request) error {
	id := r.PathValue("id")
	if _, _, ok := jobState(r.b, r.by.tenant, id); !ok {
		return notFound(r.b, r.by.tenant, id)
	}
	after, err := resumeAfter(r)
	if err != nil {
		return err
	}
	c := &cursor{jobID: id}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		last, status, _ := jobState(r.b, r.by.tenant, id)
		evs, err := c.next(r.b, after, last)
		if err != nil {
			return err
		}
		if evs == nil {
			evs = []wire.Event{}
		}
		return r.reply(http.StatusOK, wire.EventList{Events: evs, Done: status.Terminal() && c.seq >= last})
	}
	return s.streamEvents(r, c, after)
}

// resumeAfter is the number of the event a stream resumes after: the later of Last-Event-ID and
// ?after=N, or 0. An EventSource reconnects to the URL it was opened with, ?after and all, and
// sends the last event it got as Last-Event-ID: the later one is where it is, and a resume never
// goes back to send an event twice.
func resumeAfter(r *request) (int, error) {
	after := 0
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")} {
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, errorf(actors.CodeInvalidArgument, "the event to resume after must be a number, not %q", clip(v))
		}
		after = max(after, n)
	}
	return after, nil
}

func (s *Server) streamEvents(r *request, c *cursor, after int) error {
	return s.serveStream(r, func() ([]wire.Event, bool, string, error) {
		last, status, _ := jobState(r.b, r.by.tenant, c.jobID)
		if c.seq < last {
			before := c.seq
			evs, err := c.next(r.b, after, last)
			if err == nil && c.seq == before {
				err = errStreamBehind
			}
			return evs, true, "", err
		}
		if status.Terminal() {
			return nil, false, string(status), nil
		}
		return nil, false, "", nil
	})
}

// errStreamBehind: the log has not the events the projections say it has (yet).
var errStreamBehind = errors.New("the log is behind the projections")

// serveStream writes an SSE stream. read returns the next events and more (read again at once),
// or, with nothing left to send, the status to end the stream with (`event: done`) once it is
// over; an error ends the stream, and the client resumes. Between reads that find nothing, it
// waits for the projections to change, sending keep-alives.
func (s *Server) serveStream(r *request, read func() (evs []wire.Event, more bool, done string, err error)) error {
	w, rc := r.w, http.NewResponseController(r.w)
	started := false
	start := func() bool {
		if !started {
			h := w.Header()
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
			started = true
			// The headers go at once, so a client sees the stream open while it waits for a
			// first event.
			return s.flush(rc, w, nil)
		}
		return true
	}
	keepAlive := time.NewTicker(KeepAliveInterval)
	defer keepAlive.Stop()
	var buf []byte
	for {
		changed := r.b.Changed() // before reading, so no change between the read and the wait is missed
		for more := true; more; {
			var evs []wire.Event
			var done string
			var err error
			if evs, more, done, err = read(); err != nil {
				if !started {
					return err // an answer with its code, not an empty stream to resume
				}
				return nil
			}
			if !start() {
				return nil
			}
			if done != "" {
				s.flush(rc, w, fmt.Appendf(nil, "event: done\ndata: {\"status\":%q}\n\n", done))
				return nil
			}
			if len(evs) == 0 {
				continue
			}
			buf = buf[:0]
			for _, e := range evs {
				data, _ := json.Marshal(e)
				buf = fmt.Appendf(buf, "id: %d\nevent: %s\ndata: %s\n\n", e.Number, e.Type, data)
			}
			if !s.flush(rc, w, buf) {
				return nil
			}
		}
		if !start() {
			return nil
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if !s.flush(rc, w, []byte(": keep-alive\n\n")) {
				return nil
			}
		case <-r.Context().Done():
			return nil
		case <-s.shutdown:
			return nil
		}
	}
}

// flush writes and flushes b under a fresh write deadline; false means the client is gone.
func (s *Server) flush(rc *http.ResponseController, w http.ResponseWriter, b []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}
