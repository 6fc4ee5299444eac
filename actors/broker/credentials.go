package broker

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"time"

	"github.com/tetherhq/tether/actors"
	"github.com/tetherhq/tether/projections"
)

// Secret prefixes say what a token is when one turns up in a config file or a paste.
const (
	APIKeyPrefix      = "tk_"
	EnrollTokenPrefix = "te_"
	WorkerTokenPrefix = "tw_"
)

// newSecret returns prefix and 256 random bits from crypto/rand, base64url.
func newSecret(prefix string) (string, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(raw[:]), nil
}

// NewAPIKey is a tenant's new API key. Key is shown only here; the log holds its hash.
type NewAPIKey struct {
	ID      string
	Key     string
	Receipt actors.Receipt
}

// CreateAPIKey issues an API key for a tenant.
func (b *Broker) CreateAPIKey(ctx context.Context, tenant string) (NewAPIKey, error) {
	key, err := newSecret(APIKeyPrefix)
	if err != nil {
		return NewAPIKey{}, err
	}
	r, err := callFor[actors.Created](ctx, b, actors.TenantRef(tenant), actors.CreateAPIKey{Tenant: tenant, KeyHash: TokenHash(key)})
	if err != nil || r.Err != nil {
		return NewAPIKey{}, firstErr(err, r.Err)
	}
	return NewAPIKey{ID: r.ID, Key: key, Receipt: r.Receipt}, nil
}

// RevokeAPIKey stops an API key, whichever tenant it belongs to.
func (b *Broker) RevokeAPIKey(ctx context.Context, id string) (actors.Receipt, error) {
	var k projections.APIKey
	var ok bool
	b.Read(func(s *projections.Set) { k, ok = s.APIKey(id) })
	if !ok {
		return actors.Receipt{}, &actors.Rejection{Code: actors.CodeAPIKeyNotFound, Message: "no such API key"}
	}
	return b.done(ctx, actors.TenantRef(k.Tenant), actors.RevokeAPIKey{Tenant: k.Tenant, KeyID: id})
}

// APIKeyByToken finds the API key a secret belongs to, revoked or not.
func (b *Broker) APIKeyByToken(key string) (k projections.APIKey, ok bool) {
	b.rt.Read(func(set *projections.Set) { k, ok = set.APIKeyByHash(TokenHash(key)) })
	return k, ok
}

// NewEnrollToken is a tenant's new enroll token. Token is shown only here.
type NewEnrollToken struct {
	ID        string
	Token     string
	ExpiresAt time.Time
	Receipt   actors.Receipt
}

// CreateEnrollToken issues a token that lets uses workers register for a tenant within ttl
// (0: actors.EnrollTTLDefault).
func (b *Broker) CreateEnrollToken(ctx context.Context, tenant string, uses int, ttl time.Duration) (NewEnrollToken, error) {
	token, err := newSecret(EnrollTokenPrefix)
	if err != nil {
		return NewEnrollToken{}, err
	}
	if ttl == 0 {
		ttl = actors.EnrollTTLDefault
	}
	exp := b.clock().Add(ttl).UTC()
	r, err := callFor[actors.Created](ctx, b, actors.TenantRef(tenant), actors.CreateEnrollToken{Tenant: tenant, TokenHash: TokenHash(token), Uses: uses, ExpiresAt: exp})
	if err != nil || r.Err != nil {
		return NewEnrollToken{}, firstErr(err, r.Err)
	}
	return NewEnrollToken{ID: r.ID, Token: token, ExpiresAt: exp, Receipt: r.Receipt}, nil
}

// EnrollTokenByToken finds the enroll token a secret belongs to, spent or expired or not.
func (b *Broker) EnrollTokenByToken(token string) (t projections.EnrollToken, ok bool) {
	b.rt.Read(func(set *projections.Set) { t, ok = set.EnrollTokenByHash(TokenHash(token)) })
	return t, ok
}
