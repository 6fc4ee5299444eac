package transport

import (
	"math"
	"net/http"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/transport/wire"
)

// setRateLimit serves PUT /v1/rate-limits/{name} and its admin twin under
// /v1/admin/tenants/{tenant}: the limit, new or changed, as it stands once durable.
func (s *Server) setRateLimit(r *request) error {
	tenant, err := queueTenant(r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	var req wire.RateLimitRequest
	if err := r.decode(SmallBodyBytesMax, &req); err != nil {
		return err
	}
	if req.Burst == 0 && req.Rate > 0 && req.Rate <= actors.RateMax {
		req.Burst = max(1, int(math.Ceil(req.Rate)))
	}
	rc, err := r.b.SetRateLimit(r.Context(), tenant, r.by.apiKeyID, name, req.Rate, req.Burst)
	if err != nil {
		return err
	}
	out, err := rateLimitNamed(r, tenant, name)
	if err != nil {
		return err
	}
	out.Receipt = new(receipt(rc))
	return r.reply(http.StatusOK, out)
}

// deleteRateLimit serves DELETE /v1/rate-limits/{name} and its admin twin: the jobs that name
// the limit are no longer held back by it, and new ones are refused until it is set again.
func (s *Server) deleteRateLimit(r *request) error {
	tenant, err := queueTenant(r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	rc, err := r.b.DeleteRateLimit(r.Context(), tenant, r.by.apiKeyID, name)
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, wire.RateLimitDeleted{Name: name, Deleted: true, Receipt: new(receipt(rc))})
}

// rateLimits serves GET /v1/rate-limits and its admin twin: the tenant's limits, by name.
func (s *Server) rateLimits(r *request) error {
	tenant, err := queueTenant(r)
	if err != nil {
		return err
	}
	states, err := r.b.RateLimits(r.Context(), tenant)
	if err != nil {
		return err
	}
	out := wire.RateLimitList{RateLimits: []wire.RateLimit{}}
	for _, st := range states {
		out.RateLimits = append(out.RateLimits, wireRateLimit(st))
	}
	return r.reply(http.StatusOK, out)
}

// getRateLimit serves GET /v1/rate-limits/{name} and its admin twin.
func (s *Server) getRateLimit(r *request) error {
	tenant, err := queueTenant(r)
	if err != nil {
		return err
	}
	out, err := rateLimitNamed(r, tenant, r.PathValue("name"))
	if err != nil {
		return err
	}
	return r.reply(http.StatusOK, out)
}

func rateLimitNamed(r *request, tenant, name string) (wire.RateLimit, error) {
	states, err := r.b.RateLimits(r.Context(), tenant)
	if err != nil {
		return wire.RateLimit{}, err
	}
	for _, st := range states {
		if st.Name == name {
			return wireRateLimit(st), nil
		}
	}
	return wire.RateLimit{}, errorf(actors.CodeRateLimitNotFound, "tenant %s has no rate limit %q", tenant, clip(name))
}

func wireRateLimit(st actors.RateLimitState) wire.RateLimit {
	return wire.RateLimit{Name: st.Name, Rate: st.Rate, Burst: st.Burst, Tokens: math.Floor(st.Tokens*1000) / 1000, BucketsBelowFull: st.Buckets}
}

// rateLimitUses and wireRateLimits convert a job's rate limits between the wire and the log.
func rateLimitUses(in []wire.RateLimitUse) []eventlog.RateLimitUse {
	if len(in) == 0 {
		return nil
	}
	out := make([]eventlog.RateLimitUse, len(in))
	for i, u := range in {
		out[i] = eventlog.RateLimitUse{Name: u.Name, Key: u.Key}
	}
	return out
}

func wireRateLimits(in []eventlog.RateLimitUse) []wire.RateLimitUse {
	if len(in) == 0 {
		return nil
	}
	out := make([]wire.RateLimitUse, len(in))
	for i, u := range in {
		out[i] = wire.RateLimitUse{Name: u.Name, Key: u.Key}
	}
	return out
}
