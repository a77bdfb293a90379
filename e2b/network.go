package e2b

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// E2B's network options on our allow-list (docs/e2b.md, "Network").
//
// E2B opens the internet by default and narrows it with allowOut and
// denyOut (allowed entries win over denied ones). sandboxapi never opens
// everything: a sandbox has no network unless it names the hosts it may
// reach. So allowOut becomes the session's allowed_domains (an allow-list:
// everything else is refused, as if denyOut held 0.0.0.0/0), denyOut its
// denied list (which, on ours, wins over allowed entries: stricter than
// E2B, never wider), and a request that asks for more than an allow-list
// (internet access, or a deny-list alone, which would leave every other
// host open) is refused with a message saying what to send instead.

// allTraffic are E2B's spellings of "every address" (its ALL_TRAFFIC and
// the IPv6 one): in denyOut they say "nothing but allowOut", which is
// what an allow-list of ours does anyway, so they are dropped there (our
// denied list would refuse every allowed host that resolves into them).
var allTraffic = map[string]bool{"0.0.0.0/0": true, "::/0": true}

// networkBody is E2B's SandboxNetworkConfig and SandboxNetworkUpdateConfig
// as the SDK sends them. What has no equivalent here is decoded only to be
// refused.
type networkBody struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	Rules              json.RawMessage `json:"rules"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	MaskRequestHost    json.RawMessage `json:"maskRequestHost"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts"`
	// AllowInternetAccess is the update's allow_internet_access; create
	// sends it beside the network block.
	AllowInternetAccess *bool `json:"allow_internet_access"`
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) }

// ourNetwork maps E2B's options onto our network block. internet is
// allow_internet_access (nil: not sent). The result is the block a /v1
// create or PATCH takes: enabled with the lists, or off. The entries are
// passed on as sent: the API checks them (syntax, caps, the plan) and its
// 400 or 403 comes back as the SDK's error.
func ourNetwork(internet *bool, nb networkBody) (wire.Network, error) {
	switch {
	case present(nb.Rules):
		return wire.Network{}, errf(http.StatusBadRequest, "network rules (request transforms) are not supported by sandboxapi's E2B API: use a /v1 session's network.credentials to have the egress proxy set a header")
	case present(nb.EgressProxy):
		return wire.Network{}, errf(http.StatusBadRequest, "egressProxy is not supported by sandboxapi: every connection goes through its own egress proxy")
	case present(nb.MaskRequestHost), present(nb.HTTPSPorts):
		return wire.Network{}, errf(http.StatusBadRequest, "maskRequestHost and httpsPorts are not supported: sandboxapi serves no sandbox ports")
	}
	deny := make([]string, 0, len(nb.DenyOut))
	for _, d := range nb.DenyOut {
		if !allTraffic[d] {
			deny = append(deny, d)
		}
	}
	if len(nb.AllowOut) > 0 {
		return wire.Network{Enabled: true, AllowedDomains: nb.AllowOut, Denied: deny}, nil
	}
	off := internet != nil && !*internet
	switch {
	case internet != nil && *internet:
		return wire.Network{}, errf(http.StatusBadRequest, "internet access is not granted by sandboxapi: it never opens every host; name the hosts, addresses or CIDR prefixes the sandbox may reach in network.allowOut")
	case len(deny) > 0 && !off:
		return wire.Network{}, errf(http.StatusBadRequest, "a denyOut list alone would leave every other host open, which sandboxapi never does: name the hosts the sandbox may reach in network.allowOut (denyOut then narrows them)")
	}
	return wire.Network{}, nil
}

// updateNetwork: PUT /sandboxes/{id}/network -> PATCH
// /v1/sessions/{id}/network. E2B replaces the whole configuration (an
// omitted field is cleared), and so does the PATCH. A running sandbox
// made without network has no network namespace to attach: the API's 409
// network_not_attached comes back with what to do instead.
func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request, c caller) error {
	var nb networkBody
	if err := decodeBody(w, r, &nb); err != nil {
		return err
	}
	net, err := ourNetwork(nb.AllowInternetAccess, nb)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, _, err := h.lookup(r, c, id); err != nil {
		return err
	}
	if _, err := c.call(http.MethodPatch, "/v1/sessions/"+url.PathEscape(id)+"/network", net, nil); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Code == "network_not_attached" {
			return errf(http.StatusConflict, "sandbox "+id+" was created without network and is running: pause it, update its network, then connect (it resumes with the new network)")
		}
		return notFoundAs(err, id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// network is a create's network block of ours (network.go's mapping of
// allow_internet_access and network).
func (b *createBody) network() (wire.Network, error) {
	var nb networkBody
	if present(b.Network) {
		if err := json.Unmarshal(b.Network, &nb); err != nil {
			return wire.Network{}, errf(http.StatusBadRequest, "network is not E2B's network object: "+err.Error())
		}
		if nb.AllowInternetAccess != nil {
			return wire.Network{}, errf(http.StatusBadRequest, "allow_internet_access goes beside network, not in it")
		}
	}
	return ourNetwork(b.AllowInternetAccess, nb)
}

// infoNetwork is E2B's SandboxNetworkConfig as getInfo reports it.
type infoNetwork struct {
	AllowOut []string `json:"allowOut"`
	DenyOut  []string `json:"denyOut"`
}

// e2bNetwork is a session's network in E2B's words: an allow-list is
// allowOut with everything else denied (denyOut lists ALL_TRAFFIC after
// the session's own denied entries, which is what the allow-list does); a
// session a /v1 PATCH opened to every public host has no allowOut and
// only its denied entries; no network is nil.
func e2bNetwork(n wire.Network) *infoNetwork {
	if !n.Enabled {
		return nil
	}
	out := &infoNetwork{AllowOut: append([]string{}, n.AllowedDomains...), DenyOut: append([]string{}, n.Denied...)}
	if len(out.AllowOut) > 0 {
		out.DenyOut = append(out.DenyOut, "0.0.0.0/0")
	}
	return out
}
