package sandbox

import "encoding/json"

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

// JSON is n as it is stored and shown.
func (n NetworkRequest) JSON() json.RawMessage {
	b, _ := json.Marshal(n) // cannot fail: strings and a bool
	return b
}

// NetworkAttachment is what a sandbox needs to use its session network:
// the namespace to join, the proxy variables for every execute and its
// /etc/resolv.conf.
type NetworkAttachment struct {
	NetnsPath  string   `json:"netns_path"`
	Env        []string `json:"env"`         // proxy variables for every execute
	ResolvConf string   `json:"resolv_conf"` // /etc/resolv.conf inside the sandbox
}
