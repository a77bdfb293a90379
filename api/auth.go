package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// Principal is the authenticated caller.
type Principal struct {
	KeyID string
	Name  string
	Plan  *Plan
}

// Keys resolves a presented secret to its key; the api owns this seam.
type Keys interface {
	// Lookup returns the key id, name and plan name for the SHA-256 hex of
	// a secret, or ErrUnknownKey.
	Lookup(ctx context.Context, hash string) (id, name, plan string, err error)
}

// ErrUnknownKey is returned by Keys for a secret it does not hold.
var ErrUnknownKey = errors.New("unknown key")

// HashKey is how secrets are stored and looked up.
func HashKey(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// GatewayConfig enables running behind a RapidAPI-style gateway: requests
// must carry the shared secret in X-RapidAPI-Proxy-Secret, and the user and
// plan come from the gateway's headers. Off unless Secret is set.
type GatewayConfig struct {
	Secret string `yaml:"secret"`
}

// presentedKey returns the key from X-RapidAPI-Key, Authorization: Bearer
// or X-API-Key, in that order.
func presentedKey(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get("X-RapidAPI-Key")); k != "" {
		return k
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return strings.TrimSpace(r.Header.Get("X-API-Key"))
}

// authenticate resolves the caller or returns a 401/403 *Error.
func (s *Server) authenticate(r *http.Request) (*Principal, error) {
	if s.cfg.Gateway.Secret != "" {
		got := r.Header.Get("X-RapidAPI-Proxy-Secret")
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Gateway.Secret)) != 1 {
			return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "requests must come through the gateway")
		}
		user := strings.TrimSpace(r.Header.Get("X-RapidAPI-User"))
		planName := strings.TrimSpace(r.Header.Get("X-RapidAPI-Subscription"))
		if user == "" || len(user) > 128 {
			return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "the gateway sent no user")
		}
		plan, ok := s.plans.Get(planName)
		if !ok {
			return nil, apiErr(http.StatusForbidden, "unknown_plan", "the gateway sent an unknown plan")
		}
		return &Principal{KeyID: "gw:" + user, Name: user, Plan: plan}, nil
	}
	secret := presentedKey(r)
	if secret == "" {
		return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "send your API key in X-RapidAPI-Key, Authorization: Bearer or X-API-Key")
	}
	if len(secret) > 256 {
		return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "unknown API key")
	}
	id, name, planName, err := s.keys.Lookup(r.Context(), HashKey(secret))
	if errors.Is(err, ErrUnknownKey) {
		return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "unknown API key")
	}
	if err != nil {
		return nil, err
	}
	plan, ok := s.plans.Get(planName)
	if !ok {
		return nil, apiErr(http.StatusForbidden, "unknown_plan", "the key's plan %q is not configured", planName)
	}
	return &Principal{KeyID: id, Name: name, Plan: plan}, nil
}

type principalKey struct{}

func withPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principal(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}
