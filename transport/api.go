package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/actors/broker"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/eventlog/fastjson"
	"github.com/tetherhq/tether/projections"
	"github.com/tetherhq/tether/transport/wire"
)

// apiError is an error with its HTTP status and stable code.
type apiError struct {
	status  int
	code    string
	message string
	details map[string]any
	header  http.Header // set on the answer besides the error shape; nil for most
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

// errorf makes an error with a code of the table (wire.ErrorCodes), which gives its status.
func errorf[C ~string](code C, format string, args ...any) *apiError {
	return &apiError{status: wire.StatusOf(string(code)), code: string(code), message: fmt.Sprintf(format, args...)}
}

// toAPIError turns any error a handler returns into the one shape clients see.
func toAPIError(err error) *apiError {
	var ae *apiError
	var rej *actors.Rejection
	var tooBig *http.MaxBytesError
	var gap *eventlog.GapError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &rej):
		e := errorf(rej.Code, "%s", rej.Message)
		e.details = rej.Details
		return e
	case errors.As(err, &tooBig):
		return errorf(actors.CodePayloadTooLarge, "the body is larger than %d bytes", tooBig.Limit)
	case errors.As(err, &gap):
		e := errorf(wire.CodeHistoryGone, "records %d..%d are archived in segments that are not here: %s", gap.First, gap.Last, gap.Why)
		e.details = map[string]any{"first": gap.First, "last": gap.Last, "pruned": gap.Pruned}
		return e
	case errors.Is(err, eventlog.ErrCorruptSegment), errors.Is(err, eventlog.ErrChainBroken):
		e := errorf(wire.CodeHistoryGone, "records this read needs do not read: %v", err)
		e.details = map[string]any{"pruned": false}
		if segErr := (*eventlog.SegmentError)(nil); errors.As(err, &segErr) {
			e.details["segment"] = segErr.Name // GET /v1/archive says what the scrub found wrong with it
		}
		return e
	case errors.Is(err, broker.ErrClosed):
		return errorf(actors.CodeUnavailable, "the server is shutting down")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return errorf(actors.CodeUnavailable, "the request ended before the broker answered: %v", err)
	default:
		return errorf(actors.CodeUnavailable, "%v", err)
	}
}

// writeError writes e in the error shape, with the exchange's request id (requestIDs.assign).
func writeError(w http.ResponseWriter, e *apiError) {
	for k, v := range e.header {
		w.Header()[k] = v
	}
	details := e.details
	if details == nil {
		details = map[string]any{}
	}
	writeJSON(w, e.status, wire.Error{Error: wire.ErrorDetail{Code: e.code, Message: e.message, Details: details, RequestID: w.Header().Get(RequestIDHeader)}})
}

// principal is who a request comes from.
type principal struct {
	tenant   string
	apiKeyID string // "" under AuthNone and for the admin
	admin    bool
	worker   projections.Worker
	enrollID string // the enroll token a registration spends
}

// by names the principal in events that record who did something.
func (p principal) by() string {
	if p.admin {
		return "admin"
	}
	return p.apiKeyID
}

type authKind int

const (
	authNone authKind = iota
	authClient
	authClientOrAdmin
	authAdmin
	authEnroll
	authWorker
	authMetrics // open under AuthNone; the admin or metrics token under AuthToken
)

// request is what a handler gets: the broker, who is asking, and the HTTP exchange.
type request struct {
	*http.Request
	w  http.ResponseWriter
	b  Core
	by principal
}

// api wraps a handler: the broker must be ready, the caller authenticated for kind, and any
// error the handler returns is written in the error shape.
func (s *Server) api(kind authKind, h func(*request) error) http.Handler {
	return s.apiWith(kind, jsonBody, h)
}

// apiWith is api for a handler whose body is checked by body rather than jsonBody.
func (s *Server) apiWith(kind authKind, body func(*http.Request) error, h func(*request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := s.loaded()
		if b == nil {
			if e := s.standbyError(); e != nil {
				writeError(w, e)
				return
			}
			writeError(w, errorf(wire.CodeNotReady, "the server is recovering; try again shortly"))
			return
		}
		if r.URL.RawQuery != "" && credentialInQuery(r.URL.Query()) {
			writeError(w, errorf(actors.CodeInvalidArgument, "credentials are never accepted in the query string; send an Authorization header"))
			return
		}
		p, err := s.authenticate(b, r, kind)
		if err == nil {
			err = body(r)
		}
		if err == nil {
			err = h(&request{Request: r, w: w, b: b, by: p})
		}
		if err == nil {
			return
		}
		e := toAPIError(err)
		switch {
		case e.status >= 500 && r.Context().Err() != nil:
			// The client went away (a worker's abandoned heartbeat, a closed tab), and the call
			// ended for that: nothing wrong with the server, and nobody to answer. A refusal of
			// the request itself (a body cut short: a client that closed its side after it)
			// is still answered, as it would be otherwise: a client that reads on must never
			// take net/http's empty 200 for a success.
			if ce := s.log.Check(zap.DebugLevel, "the client went away before the answer"); ce != nil {
				ce.Write(requestFields(r, p, zap.String("error", err.Error()))...)
			}
			return
		case e.status >= 500:
			s.log.Error("request failed", requestFields(r, p, zap.String("code", e.code), zap.String("error", e.message))...)
		default:
			if ce := s.log.Check(zap.DebugLevel, "request refused"); ce != nil {
				ce.Write(requestFields(r, p, zap.Int("status", e.status), zap.String("code", e.code), zap.String("error", e.message))...)
			}
		}
		writeError(w, e)
	})
}

// checkSite refuses what a page on another web site could make a browser send here. Under any
// auth, a state-changing request the browser marks cross-site. Under --auth none, where no
// credential stands between a page and the API, also a Host that is not a loopback name (DNS
// rebinding: a page whose own name now points at 127.0.0.1) and an Origin that is not this
// server's own. The health endpoints carry nothing worth stealing and stay open.
func (s *Server) checkSite(r *http.Request) *apiError {
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
	if !safe && r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return errorf(wire.CodeCrossSiteRequest, "a state-changing request from another web site is refused")
	}
	if s.cfg.Auth != AuthNone || r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
		return nil
	}
	if !loopbackHost(r.Host) {
		return errorf(wire.CodeHostNotAllowed,
			"under --auth none this server answers only to a loopback host (localhost, 127.0.0.1, [::1]), not %q", clip(r.Host))
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
		return errorf(wire.CodeOriginNotAllowed, "under --auth none only pages of this server may call it, not %q", clip(o))
	}
	return nil
}

// loopbackHost reports whether a Host header names this machine: localhost (or a name under
// .localhost, which browsers resolve to loopback themselves) or a loopback address. No Host at
// all (HTTP/1.0) is no browser's request.
func loopbackHost(hostport string) bool {
	if hostport == "" || loopbackLiteral(hostport) {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackLiteral reports, without allocating, whether a Host header is one of the loopback
// names clients send most (localhost, 127.0.0.1, [::1]), with or without a port; loopbackHost
// decides the rest.
func loopbackLiteral(hostport string) bool {
	host := hostport
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && hostport != "[::1]" {
		port := hostport[i+1:]
		if port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "" {
			return false
		}
		host = hostport[:i]
	}
	return host == "localhost" || host == "127.0.0.1" || host == "[::1]"
}

// sameOrigin reports whether an Origin header names the site a request was sent to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Path == "" && strings.EqualFold(u.Host, host)
}

// requestFields names a request in a log line: its id, its route, and the tenant, worker and
// job it concerns. Never its headers or body, which carry credentials and payloads.
func requestFields(r *http.Request, p principal, fields ...zap.Field) []zap.Field {
	fields = append(fields, zap.String("request_id", r.Header.Get(RequestIDHeader)), zap.String("method", r.Method), zap.String("path", r.URL.Path))
	if p.tenant != "" {
		fields = append(fields, zap.String("tenant", p.tenant))
	}
	if p.worker.ID != "" {
		fields = append(fields, zap.String("worker_id", p.worker.ID))
	}
	if id := r.PathValue("id"); id != "" && strings.Contains(r.Pattern, "/jobs/{id}") {
		fields = append(fields, zap.String("job_id", id))
	}
	return fields
}

func credentialInQuery(q url.Values) bool {
	return q.Has("token") || q.Has("api_key") || q.Has("access_token")
}

// apiKeyHeader is X-API-Key in the canonical form net/http stores it under, which Get then
// finds without canonicalizing it again.
const apiKeyHeader = "X-Api-Key"

// bearer returns the credential a request carries: Authorization: Bearer, or X-API-Key.
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
		return ""
	}
	return strings.TrimSpace(r.Header.Get(apiKeyHeader))
}

var errNoCredential = errorf(actors.CodeUnauthenticated, "this endpoint needs a credential: Authorization: Bearer <token>")

func (s *Server) authenticate(b Core, r *http.Request, kind authKind) (principal, error) {
	token := bearer(r)
	open := s.cfg.Auth == AuthNone
	switch kind {
	case authNone:
		return principal{}, nil
	case authMetrics:
		if open || s.isAdmin(token) || (s.cfg.MetricsToken != "" && sameSecret(token, s.cfg.MetricsToken)) {
			return principal{}, nil
		}
		if token == "" {
			return principal{}, errorf(actors.CodeUnauthenticated, "under --auth token /metrics needs the metrics token or the admin token")
		}
		return principal{}, errorf(actors.CodePermissionDenied, "this endpoint needs the metrics token or the admin token")
	case authAdmin:
		if open || s.isAdmin(token) {
			return principal{admin: true}, nil
		}
		if token == "" {
			return principal{}, errNoCredential
		}
		return principal{}, errorf(actors.CodePermissionDenied, "this endpoint needs the admin token")
	case authClient, authClientOrAdmin:
		if open {
			return principal{tenant: DefaultTenant}, nil
		}
		if kind == authClientOrAdmin && s.isAdmin(token) {
			return principal{admin: true}, nil
		}
		if token == "" {
			return principal{}, errNoCredential
		}
		k, ok := b.APIKeyByToken(token)
		switch {
		case !ok:
			return principal{}, errorf(actors.CodeUnauthenticated, "unknown API key")
		case k.Revoked:
			return principal{}, errorf(actors.CodePermissionDenied, "the API key was revoked")
		}
		return principal{tenant: k.Tenant, apiKeyID: k.ID}, nil
	case authEnroll:
		if open {
			return principal{tenant: DefaultTenant}, nil
		}
		if token == "" {
			return principal{}, errNoCredential
		}
		t, ok := b.EnrollTokenByToken(token)
		switch {
		case !ok:
			return principal{}, errorf(actors.CodeUnauthenticated, "unknown enroll token")
		case !s.clock().Before(t.ExpiresAt):
			return principal{}, errorf(actors.CodeTokenExpired, "the enroll token expired at %s", t.ExpiresAt.Format(time.RFC3339))
		}
		return principal{tenant: t.Tenant, enrollID: t.ID}, nil
	case authWorker:
		if token == "" {
			return principal{}, errNoCredential
		}
		wk, ok := b.WorkerByToken(token)
		if !ok {
			return principal{}, errorf(actors.CodeUnauthenticated, "unknown worker token")
		}
		if wk.Revoked {
			return principal{}, errorf(actors.CodeWorkerRevoked, "worker %s is revoked", wk.ID)
		}
		if until := wk.TokenValidUntil(broker.TokenHash(token)); !s.clock().Before(until) {
			if until != wk.ExpiresAt {
				return principal{}, errorf(actors.CodeTokenExpired, "this worker token was renewed, and stopped working at %s; use the new one", until.Format(time.RFC3339))
			}
			return principal{}, errorf(actors.CodeTokenExpired, "the worker token expired at %s; register again", until.Format(time.RFC3339))
		}
		b.Touch(wk.ID, s.clock())
		return principal{tenant: wk.Tenant, worker: wk}, nil
	}
	return principal{}, errors.New("transport: unknown auth kind")
}

// isAdmin compares a token with the admin token in constant time.
func (s *Server) isAdmin(token string) bool {
	return s.cfg.AdminToken != "" && sameSecret(token, s.cfg.AdminToken)
}

// sameSecret compares a token with a secret in constant time, over their hashes so that the
// lengths leak nothing either.
func sameSecret(token, secret string) bool {
	if token == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// Body limits. A submit carries up to a payload; a batch up to BatchBodyBytesMax; a completion
// an output; everything else is small.
const (
	SmallBodyBytesMax    = 64 << 10
	BatchBodyBytesMax    = 16 << 20
	envelopeBytes        = 64 << 10 // room for a body's fields around its payload or output
	IdempotencyKeyHeader = "Idempotency-Key"
)

// jsonBody refuses a body that is not declared JSON. A web page can make a browser send a
// text/plain or form body to any site without asking first (a "simple request"); it cannot send
// application/json without a CORS preflight, which this server never grants. So a request that
// carries a body, or says what its body is, must say application/json (or another +json type).
func jsonBody(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "application/json" || r.Method == http.MethodGet || r.Method == http.MethodHead || (ct == "" && r.ContentLength == 0) {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return errorf(wire.CodeUnsupportedMedia, "the body must be JSON sent with Content-Type: application/json, not %s", clip(ct))
}

// decode reads a JSON body of at most limit bytes into v, refusing what checkJSON refuses,
// unknown fields, trailing data and a missing body (jsonBody has checked its Content-Type).
func (r *request) decode(limit int64, v any) error {
	buf := getBody() // read whole, for checkJSON and codec.go
	defer putBody(buf)
	if err := readBody(r.w, r.Request, limit, buf); err != nil {
		return jsonError(err)
	}
	return decodeBody(buf.Bytes(), v)
}

// decodeSubmit is decode for a submit's body, without the allocation of a req that escapes
// through decode's v: only a body that decodeSubmitFast leaves to the strict decoder costs one.
func (r *request) decodeSubmit(limit int64, req *wire.SubmitRequest) error {
	buf := getBody()
	defer putBody(buf)
	if err := readBody(r.w, r.Request, limit, buf); err != nil {
		return jsonError(err)
	}
	body := buf.Bytes()
	if err := checkJSON(body, "the body"); err != nil {
		return err
	}
	if decodeSubmitFast(body, req) {
		return nil
	}
	strict := new(wire.SubmitRequest)
	err := decodeStrict(bytes.NewReader(body), strict)
	*req = *strict
	return err
}

// readBody reads a request's whole body into buf, refusing one over limit bytes. A body whose
// declared length is within limit is read to its end, into room made for it at once (up to
// keepMax: a client that only declares a large body does not get the server to allocate it),
// and closed, so that net/http has nothing to drain after the handler; any other goes through
// http.MaxBytesReader, which also has the connection closed after a body over the limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, buf *bytes.Buffer) error {
	if n := r.ContentLength; n >= 0 && n <= limit {
		buf.Grow(int(min(n, keepMax)) + bytes.MinRead) // ReadFrom's last read, which finds the end, needs MinRead of room
		if _, err := buf.ReadFrom(r.Body); err != nil {
			return err
		}
		return r.Body.Close()
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	return err
}

// decodeBody checks a whole body and decodes it into v, through codec.go where it can.
func decodeBody(body []byte, v any) error {
	if err := checkJSON(body, "the body"); err != nil {
		return err
	}
	if req, ok := v.(*wire.BatchRequest); ok {
		if decodeBatchFast(body, req) {
			return nil
		}
		*req = wire.BatchRequest{}
	}
	return decodeStrict(bytes.NewReader(body), v)
}

// checkJSON refuses what the decoders would take and tether does not store (fastjson.Check):
// bytes that are not UTF-8, nesting deeper than wire.JSONDepthMax, a key twice in one
// object, what is not I-JSON. subject names the text in the message: "the body", "a frame". A text that is not
// JSON passes, for the decoder to say what is wrong with it.
func checkJSON(data []byte, subject string) error {
	err := fastjson.Check(data, wire.JSONDepthMax)
	if err == nil || errors.Is(err, fastjson.ErrNotJSON) {
		return nil
	}
	return errorf(wire.CodeInvalidJSON, "%s %v", subject, err)
}

// decodeStrict decodes one JSON value, refusing unknown fields and anything after the value.
func decodeStrict(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return jsonError(err)
		}
		return errorf(wire.CodeInvalidJSON, "the body holds more than one JSON value")
	}
	return nil
}

// jsonError explains a decoding error with a stable code.
func jsonError(err error) error {
	var tooBig *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var badTime *time.ParseError
	switch {
	case errors.As(err, &tooBig):
		return err
	case errors.Is(err, io.EOF):
		return errorf(wire.CodeInvalidJSON, "the body is empty; send a JSON object")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(wire.CodeInvalidJSON, "the body is not valid JSON: %v", err)
	case errors.As(err, &typ) && typ.Field == "":
		return errorf(wire.CodeInvalidJSON, "the body must be a JSON object, not a JSON %s", typ.Value)
	case errors.As(err, &typ):
		return errorf(actors.CodeInvalidArgument, "field %q must be %s, not a JSON %s", typ.Field, jsonKind(typ.Type), typ.Value)
	case errors.As(err, &badTime):
		return errorf(actors.CodeInvalidArgument, "a time must be RFC 3339, such as 2026-01-02T15:04:05Z, not %q", badTime.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return errorf(actors.CodeInvalidArgument, "%s", strings.TrimPrefix(err.Error(), "json: "))
	default:
		return errorf(wire.CodeInvalidJSON, "the body could not be read: %v", err)
	}
}

// jsonKind names, as JSON does, what a Go type takes: the Go names mean nothing to a client.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "another JSON type"
}

func (r *request) reply(status int, v any) error {
	writeJSON(r.w, status, v)
	return nil
}

func receipt(rc actors.Receipt) wire.Receipt { return wire.Receipt{Seq: rc.Seq, Hash: rc.Hash} }

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// secondsField converts a field of seconds to a duration: 0 (the default), or min..max. Any
// other value is refused with the field's name and the value as sent, before a conversion that
// could overflow (1e11 seconds is past a time.Duration's 292 years, and would wrap).
func secondsField(field string, v float64, min, max time.Duration) (time.Duration, error) {
	if v != 0 && (v < min.Seconds() || v > max.Seconds()) {
		return 0, errorf(actors.CodeInvalidArgument, "%s %s is outside %s..%s (0: the default)", field, plain(v), plain(min.Seconds()), plain(max.Seconds()))
	}
	return seconds(v), nil
}

// plain writes a number as a client wrote it, without an exponent.
func plain(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
