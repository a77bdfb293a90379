package sandbox

import (
	"encoding/json"
	"strings"
)

// NetworkRequest is a session's network block, decoded once at the API,
// carried by SessionSpec and ForkSpec, stored with the session (as its JSON)
// and read by the network layer. The zero value is a session without
// network.
type NetworkRequest struct {
	Enabled        bool     `json:"enabled"`
	AllowedDomains []string `json:"allowed_domains,omitempty"`
	// Denied are domain patterns, addresses and CIDR prefixes the
	// session may never reach; they win over AllowedDomains.
	Denied []string `json:"denied,omitempty"`
	// Credentials are headers the egress proxy adds to every request the
	// session sends to their host; the sandbox never holds their values.
	Credentials []Credential `json:"credentials,omitempty"`
}

// Credential is one header the egress proxy sets on requests to Host.
//
// Value is the secret in the clear: it is read from a client's request
// and never written by JSON encoding (see MarshalJSON). Sealed is the same
// value encrypted under the server's credentials key, the only form that
// is stored (the session's row, the egress state file) and carried
// between services; the API seals a request's values before anything else
// sees them, and only the egress proxy opens them.
type Credential struct {
	Host   string `json:"host"`
	Header string `json:"header"`
	Value  string `json:"value,omitempty"`
	Sealed string `json:"sealed,omitempty"`
}

// MarshalJSON writes c without Value, so that no encoding of a session
// (a reply, a store row, a state file, a log attribute) can carry the
// secret in the clear.
func (c Credential) MarshalJSON() ([]byte, error) {
	type plain Credential
	c.Value = ""
	return json.Marshal(plain(c))
}

// String shows c without its value (sealed or not), so that printing a
// request or a session never shows the secret (slog's text handler prints
// with it; JSON encoding goes through MarshalJSON).
func (c Credential) String() string { return c.Host + " " + c.Header + ": [redacted]" }

// GoString is String, for %#v.
func (c Credential) GoString() string { return c.String() }

// SealContext is what c's value is sealed under besides the key: its
// host and header, so that a sealed value moved to another host or header
// does not open.
func (c Credential) SealContext() string {
	return "credential\x00" + strings.ToLower(c.Host) + "\x00" + strings.ToLower(c.Header)
}

// Public is c as replies show it: the host and the header name only.
func (c Credential) Public() Credential { return Credential{Host: c.Host, Header: c.Header} }

// Public is n as replies show it: credentials without their values, sealed
// or not.
func (n NetworkRequest) Public() NetworkRequest {
	if len(n.Credentials) == 0 {
		return n
	}
	out := n
	out.Credentials = make([]Credential, len(n.Credentials))
	for i, c := range n.Credentials {
		out.Credentials[i] = c.Public()
	}
	return out
}

// ParseNetworkRequest decodes a stored network block. Empty input is a
// session without network.
func ParseNetworkRequest(raw []byte) (NetworkRequest, error) {
	var n NetworkRequest
	if len(raw) == 0 {
		return n, nil
	}
	err := json.Unmarshal(raw, &n)
	return n, err
}

// JSON is n as it is stored: credentials with their sealed values only.
func (n NetworkRequest) JSON() json.RawMessage {
	b, _ := json.Marshal(n) // cannot fail: strings and a bool
	return b
}

// NetworkAttachment is what a sandbox needs to use its session network:
// the namespace to join, the proxy variables for every execute, its
// /etc/resolv.conf and the certificate of the egress proxy's CA, which the
// sandbox trusts besides the system's roots.
type NetworkAttachment struct {
	NetnsPath  string   `json:"netns_path"`
	Env        []string `json:"env"`         // proxy variables for every execute
	ResolvConf string   `json:"resolv_conf"` // /etc/resolv.conf inside the sandbox
	// CACert is the PEM certificate of the proxy's per-server CA (empty:
	// the proxy terminates no TLS); the executor adds it to the sandbox's
	// trust store.
	CACert string `json:"ca_cert,omitempty"`
}
