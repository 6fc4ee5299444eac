package projections

import (
	"time"

	"github.com/tetherhq/tether/eventlog"
)

// APIKey is a client credential of one tenant. Only the hash of the key is known.
type APIKey struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"created_at"`
	Revoked   bool      `json:"revoked"`
}

// EnrollToken lets Uses workers register for a tenant until ExpiresAt. Only its hash is known.
type EnrollToken struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Hash      string    `json:"hash"`
	Uses      int       `json:"uses"`
	Used      int       `json:"used"`
	ExpiresAt time.Time `json:"expires_at"`
}

// credentials holds API keys and enroll tokens by id, and by hash for authentication.
type credentials struct {
	apiKeys map[string]*APIKey
	enroll  map[string]*EnrollToken
	// derived
	keyByHash    map[string]*APIKey
	enrollByHash map[string]*EnrollToken
}

func newCredentials() credentials {
	return credentials{apiKeys: map[string]*APIKey{}, enroll: map[string]*EnrollToken{}}
}

func (c *credentials) derive() {
	c.keyByHash = make(map[string]*APIKey, len(c.apiKeys))
	for _, k := range c.apiKeys {
		c.keyByHash[k.Hash] = k
	}
	c.enrollByHash = make(map[string]*EnrollToken, len(c.enroll))
	for _, t := range c.enroll {
		c.enrollByHash[t.Hash] = t
	}
}

func (c *credentials) apply(at time.Time, p eventlog.Payload) {
	switch e := p.(type) {
	case eventlog.APIKeyCreated:
		k := &APIKey{ID: e.KeyID, Tenant: e.Tenant, Hash: e.KeyHash, CreatedAt: at}
		c.apiKeys[k.ID], c.keyByHash[k.Hash] = k, k
	case eventlog.APIKeyRevoked:
		if k := c.apiKeys[e.KeyID]; k != nil {
			k.Revoked = true
		}
	case eventlog.EnrollTokenCreated:
		t := &EnrollToken{ID: e.TokenID, Tenant: e.Tenant, Hash: e.TokenHash, Uses: e.Uses, ExpiresAt: e.ExpiresAt}
		c.enroll[t.ID], c.enrollByHash[t.Hash] = t, t
	case eventlog.EnrollTokenUsed:
		if t := c.enroll[e.TokenID]; t != nil {
			t.Used++
		}
	}
}

func (c *credentials) clone() credentials {
	out := newCredentials()
	for id, k := range c.apiKeys {
		ck := *k
		out.apiKeys[id] = &ck
	}
	for id, t := range c.enroll {
		ct := *t
		out.enroll[id] = &ct
	}
	return out // the Set's derive indexes it
}

// APIKey returns an API key by id.
func (s *Set) APIKey(id string) (APIKey, bool) { return copyOf(s.creds.apiKeys, id) }

// APIKeyByHash finds the API key whose secret hashes to h, revoked or not.
func (s *Set) APIKeyByHash(h string) (APIKey, bool) { return copyOf(s.creds.keyByHash, h) }

// EnrollToken returns an enroll token by id.
func (s *Set) EnrollToken(id string) (EnrollToken, bool) { return copyOf(s.creds.enroll, id) }

// EnrollTokenByHash finds the enroll token whose secret hashes to h, used up or not.
func (s *Set) EnrollTokenByHash(h string) (EnrollToken, bool) {
	return copyOf(s.creds.enrollByHash, h)
}

// copyOf returns a copy of m[k]: callers must not reach into the Set.
func copyOf[T any](m map[string]*T, k string) (T, bool) {
	v, ok := m[k]
	if !ok {
		var zero T
		return zero, false
	}
	return *v, true
}
