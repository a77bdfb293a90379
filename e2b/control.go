package e2b

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// E2B's control plane (its OpenAPI spec as the e2b 2.51.0 SDK calls it),
// each call made of /v1 calls: docs/e2b.md has the table.

const (
	// envdVersion is the envd version the adapter reports. The SDK picks
	// its protocol by it: 0.5.7 and later upload gzip and streams as
	// application/octet-stream (served by envd.go); below 0.4.0 it sends
	// the user on every call. Raise it only with what it implies.
	envdVersion = "0.5.7"
	// clientID is what E2B calls the sandbox's client (a node there).
	clientID = "sandboxapi"
	// maxBodyBytes bounds a control-plane request body.
	maxBodyBytes = 1 << 20
	// Limits of what a sandbox record holds.
	maxMetadata      = 64
	maxMetadataKey   = 256
	maxMetadataValue = 1024
	maxEnvVars       = 256
	maxEnvBytes      = 64 << 10
	// maxListLimit is the largest page of a list (E2B's own).
	maxListLimit = 100
)

// templates maps E2B template ids onto our runtimes: all are a Python
// session, and code-interpreter's is a kernel session (its port 49999 runs
// cells on the session's kernel: interpreter.go).
var templates = map[string]template{
	"base":                {lang: "python3"},
	"code-interpreter-v1": {lang: "python3", kernel: true},
	"code-interpreter":    {lang: "python3", kernel: true},
}

// template is what an E2B template becomes: a session of this language,
// a kernel session or not.
type template struct {
	lang   string
	kernel bool
}

// createBody is E2B's NewSandbox. Fields sandboxapi cannot honour yet are
// decoded only to be refused with a clear error, never ignored.
type createBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             json.RawMessage   `json:"network"`
	MCP                 json.RawMessage   `json:"mcp"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
	IAM                 json.RawMessage   `json:"iam"`
}

// sandboxReply is E2B's Sandbox: the reply of create and connect.
type sandboxReply struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	// TrafficAccessToken is the access token again: @e2b/code-interpreter
	// sends it (E2B-Traffic-Access-Token) on its context calls, which
	// carry no X-Access-Token.
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// sandboxInfo is E2B's ListedSandbox and (with the token) SandboxDetail.
type sandboxInfo struct {
	TemplateID      string            `json:"templateID"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain"`
	VolumeMounts    []struct{}        `json:"volumeMounts"`
	// Network is the session's allow-list in E2B's words (network.go).
	Network *infoNetwork `json:"network,omitempty"`
}

// e2bState is E2B's state of one of our sessions: paused while it has no
// sandbox (hibernated), running otherwise.
func e2bState(st string) string {
	switch sandbox.State(st) {
	case sandbox.StateHibernated, sandbox.StateHibernating:
		return "paused"
	}
	return "running"
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(v); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return errf(http.StatusRequestEntityTooLarge, "request body is over 1 MiB")
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return errf(http.StatusBadRequest, "request body is not valid JSON: "+err.Error())
	}
	return nil
}

func (b *createBody) check() error {
	switch {
	case b.MCP != nil && string(b.MCP) != "null":
		return errf(http.StatusBadRequest, "mcp is not supported by sandboxapi")
	case b.VolumeMounts != nil && string(b.VolumeMounts) != "null":
		return errf(http.StatusBadRequest, "volume mounts are not supported by sandboxapi")
	case b.IAM != nil && string(b.IAM) != "null":
		return errf(http.StatusBadRequest, "iam tokens are not supported by sandboxapi")
	case b.AutoPause != nil && *b.AutoPause:
		return errf(http.StatusBadRequest, "autoPause is not supported yet: a sandbox ends at its timeout (pause it explicitly with pause)")
	case b.AutoResume != nil && string(b.AutoResume) != "null":
		return errf(http.StatusBadRequest, "autoResume is not supported by sandboxapi")
	case b.Timeout != nil && *b.Timeout <= 0:
		return errf(http.StatusBadRequest, "timeout must be a positive number of seconds")
	case len(b.Metadata) > maxMetadata:
		return errf(http.StatusBadRequest, fmt.Sprintf("metadata holds more than %d entries", maxMetadata))
	case len(b.EnvVars) > maxEnvVars:
		return errf(http.StatusBadRequest, fmt.Sprintf("envVars holds more than %d entries", maxEnvVars))
	}
	for k, v := range b.Metadata {
		if k == "" || len(k) > maxMetadataKey || len(v) > maxMetadataValue {
			return errf(http.StatusBadRequest, fmt.Sprintf("metadata keys must be 1 to %d bytes, values at most %d", maxMetadataKey, maxMetadataValue))
		}
	}
	n := 0
	for k, v := range b.EnvVars {
		n += len(k) + len(v)
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return errf(http.StatusBadRequest, "envVars names must be non-empty without '=' or NUL, values without NUL")
		}
	}
	if n > maxEnvBytes {
		return errf(http.StatusBadRequest, "envVars are over 64 KiB")
	}
	return nil
}

// create: POST /sandboxes and /v2/sandboxes.
func (h *Handler) create(w http.ResponseWriter, r *http.Request, c caller) error {
	var b createBody
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	if b.TemplateID == "" {
		b.TemplateID = "base"
	}
	tpl, ok := templates[b.TemplateID]
	if !ok {
		return errf(http.StatusBadRequest, fmt.Sprintf("template %q is not available: sandboxapi serves base and code-interpreter-v1 (custom templates are not supported)", b.TemplateID))
	}
	req := wire.CreateSessionRequest{Language: tpl.lang, Kernel: tpl.kernel}
	if net, err := b.network(); err != nil {
		return err
	} else if net.Enabled {
		req.Network = &net
	}
	if b.Timeout != nil {
		ttl := float64(*b.Timeout)
		req.IdleTTL = &ttl
	}
	var sess wire.Session
	if _, err := c.call(http.MethodPost, "/v1/sessions", req, &sess); err != nil {
		return err
	}
	// From here a failure must not leave the session behind.
	rec, token, err := h.newRecord(c.key, sess, b)
	if err == nil {
		err = h.rec.InsertE2BSandbox(r.Context(), rec)
	}
	if err != nil {
		if _, derr := c.call(http.MethodDelete, "/v1/sessions/"+url.PathEscape(sess.ID), nil, nil); derr != nil {
			h.log.Warn("e2b: removing the session of a failed create", "session", sess.ID, "err", derr)
		}
		return err
	}
	if _, err := h.rec.PruneE2BSandboxes(r.Context()); err != nil {
		h.log.Warn("e2b: pruning records of ended sandboxes", "err", err)
	}
	writeJSON(w, http.StatusCreated, sandboxReply{TemplateID: rec.Template, SandboxID: sess.ID, ClientID: clientID, EnvdVersion: envdVersion, EnvdAccessToken: token, TrafficAccessToken: &token})
	return nil
}

// newRecord seals a new sandbox's secrets.
func (h *Handler) newRecord(key string, sess wire.Session, b createBody) (store.E2BSandbox, string, error) {
	token := newAccessToken()
	meta := b.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	mj, err := json.Marshal(meta)
	if err != nil {
		return store.E2BSandbox{}, "", err
	}
	rec := store.E2BSandbox{ID: sess.ID, Template: b.TemplateID, Metadata: string(mj), TokenHash: tokenHash(token),
		CreatedAt: h.now(), EndAt: h.now().Add(time.Duration(sess.IdleTTL) * time.Second)}
	if b.Timeout != nil {
		rec.EndAt = h.now().Add(time.Duration(*b.Timeout) * time.Second)
	}
	if len(b.EnvVars) > 0 {
		ej, err := json.Marshal(b.EnvVars)
		if err != nil {
			return rec, "", err
		}
		if rec.SealedEnv, err = seal(key, sess.ID, purposeEnv, ej); err != nil {
			return rec, "", err
		}
	}
	if rec.SealedToken, err = seal(key, sess.ID, purposeToken, []byte(token)); err != nil {
		return rec, "", err
	}
	if rec.SealedKey, err = seal(token, sess.ID, purposeKey, []byte(key)); err != nil {
		return rec, "", err
	}
	return rec, token, nil
}

// lookup returns the caller's session id and its record: the API decides
// whether the caller may see it (404 otherwise, whoever owns it), and a
// session without a record (made through /v1) is not an E2B sandbox. A
// sandbox past its timeout is ended here and is not found.
func (h *Handler) lookup(r *http.Request, c caller, id string) (wire.Session, store.E2BSandbox, error) {
	var sess wire.Session
	if _, err := c.call(http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, &sess); err != nil {
		return sess, store.E2BSandbox{}, notFoundAs(err, id)
	}
	rec, err := h.rec.E2BSandbox(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return sess, rec, errf(http.StatusNotFound, "sandbox "+id+" not found")
	}
	if err != nil {
		return sess, rec, err
	}
	if h.now().After(rec.EndAt) {
		h.end(r, c, id)
		return sess, rec, errf(http.StatusNotFound, "sandbox "+id+" not found (its timeout has passed)")
	}
	return sess, rec, nil
}

// end ends a sandbox whose timeout has passed.
func (h *Handler) end(r *http.Request, c caller, id string) {
	if _, err := c.call(http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, nil); err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			h.log.Warn("e2b: ending a sandbox past its timeout", "sandbox", id, "err", err)
			return
		}
	}
	if err := h.rec.DeleteE2BSandbox(r.Context(), id); err != nil {
		h.log.Warn("e2b: deleting the record of an ended sandbox", "sandbox", id, "err", err)
	}
}

// notFoundAs names the sandbox in an API 404.
func notFoundAs(err error, id string) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return errf(http.StatusNotFound, "sandbox "+id+" not found")
	}
	return err
}

func (h *Handler) info(sess wire.Session, rec store.E2BSandbox) sandboxInfo {
	meta := map[string]string{}
	_ = json.Unmarshal([]byte(rec.Metadata), &meta)
	return sandboxInfo{TemplateID: rec.Template, SandboxID: sess.ID, ClientID: clientID, StartedAt: rec.CreatedAt, EndAt: rec.EndAt,
		CPUCount: 1, DiskSizeMB: sess.DiskMB, Metadata: meta, State: e2bState(sess.State), EnvdVersion: envdVersion, VolumeMounts: []struct{}{},
		Network: e2bNetwork(sess.Network)}
}

// get: GET /sandboxes/{id}.
func (h *Handler) get(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	sess, rec, err := h.lookup(r, c, id)
	if err != nil {
		return err
	}
	in := h.info(sess, rec)
	token, err := unseal(c.key, id, purposeToken, rec.SealedToken)
	if err != nil {
		return err
	}
	in.EnvdAccessToken = string(token)
	writeJSON(w, http.StatusOK, in)
	return nil
}

// kill: DELETE /sandboxes/{id}.
func (h *Handler) kill(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	if _, err := c.call(http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, nil); err != nil {
		return notFoundAs(err, id)
	}
	if err := h.rec.DeleteE2BSandbox(r.Context(), id); err != nil {
		h.log.Warn("e2b: deleting the record of a killed sandbox", "sandbox", id, "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setEnd moves a sandbox's timeout: POST /sandboxes/{id}/timeout
// {"timeout": s} and /refreshes {"duration": s}.
func (h *Handler) setEnd(field string) func(w http.ResponseWriter, r *http.Request, c caller) error {
	return func(w http.ResponseWriter, r *http.Request, c caller) error {
		var b map[string]json.RawMessage
		if err := decodeBody(w, r, &b); err != nil {
			return err
		}
		var secs int64
		if raw, ok := b[field]; ok {
			if err := json.Unmarshal(raw, &secs); err != nil || secs < 0 || secs > 86400*30 {
				return errf(http.StatusBadRequest, field+" must be a whole number of seconds, at most 30 days")
			}
		} else if field == "timeout" {
			return errf(http.StatusBadRequest, "timeout is required")
		}
		id := r.PathValue("id")
		if _, _, err := h.lookup(r, c, id); err != nil {
			return err
		}
		if err := h.rec.SetE2BEndAt(r.Context(), id, h.now().Add(time.Duration(secs)*time.Second)); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return errf(http.StatusNotFound, "sandbox "+id+" not found")
			}
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// pause: POST /sandboxes/{id}/pause -> hibernate (409 when paused already).
func (h *Handler) pause(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	sess, _, err := h.lookup(r, c, id)
	if err != nil {
		return err
	}
	if e2bState(sess.State) == "paused" {
		return errf(http.StatusConflict, "sandbox "+id+" is already paused")
	}
	if _, err := c.call(http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/hibernate", nil, nil); err != nil {
		return notFoundAs(err, id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect: POST /v2/sandboxes/{id}/connect {"timeout": s} (and the older
// POST /sandboxes/{id}/resume): a paused sandbox is resumed (201), a
// running one answered as it is (200); both hand out its access token.
func (h *Handler) connect(w http.ResponseWriter, r *http.Request, c caller) error {
	var b struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(w, r, &b); err != nil {
		return err
	}
	if b.Timeout != nil && (*b.Timeout < 0 || *b.Timeout > 86400*30) {
		return errf(http.StatusBadRequest, "timeout must be a whole number of seconds, at most 30 days")
	}
	id := r.PathValue("id")
	sess, rec, err := h.lookup(r, c, id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if e2bState(sess.State) == "paused" {
		// Any call on a hibernated session resumes it: a listing of the
		// home is the cheapest (no process runs).
		if _, err := c.call(http.MethodGet, "/v1/sessions/"+url.PathEscape(id)+"/files?dir="+url.QueryEscape(ourHome), nil, nil); err != nil {
			return notFoundAs(err, id)
		}
		status = http.StatusCreated
	}
	if b.Timeout != nil {
		if end := h.now().Add(time.Duration(*b.Timeout) * time.Second); end.After(rec.EndAt) {
			if err := h.rec.SetE2BEndAt(r.Context(), id, end); err != nil {
				return err
			}
		}
	}
	token, err := unseal(c.key, id, purposeToken, rec.SealedToken)
	if err != nil {
		return err
	}
	tok := string(token)
	writeJSON(w, status, sandboxReply{TemplateID: rec.Template, SandboxID: id, ClientID: clientID, EnvdVersion: envdVersion, EnvdAccessToken: tok, TrafficAccessToken: &tok})
	return nil
}

// list: GET /v2/sandboxes (paged, x-next-token) and GET /sandboxes (all
// running ones), with E2B's metadata and state filters.
func (h *Handler) list(paged bool) func(w http.ResponseWriter, r *http.Request, c caller) error {
	return func(w http.ResponseWriter, r *http.Request, c caller) error {
		q := r.URL.Query()
		want, err := metadataFilter(q.Get("metadata"))
		if err != nil {
			return err
		}
		states := map[string]bool{"running": true, "paused": paged}
		if s := q.Get("state"); s != "" {
			states = map[string]bool{}
			for _, st := range strings.Split(s, ",") {
				if st != "running" && st != "paused" {
					return errf(http.StatusBadRequest, "state must be running or paused")
				}
				states[st] = true
			}
		}
		limit := maxListLimit
		if l := q.Get("limit"); l != "" && paged {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 || n > maxListLimit {
				return errf(http.StatusBadRequest, fmt.Sprintf("limit must be 1 to %d", maxListLimit))
			}
			limit = n
		}
		after := ""
		if t := q.Get("nextToken"); t != "" && paged {
			b, err := base64.RawURLEncoding.DecodeString(t)
			if err != nil {
				return errf(http.StatusBadRequest, "nextToken is not one this server gave")
			}
			after = string(b)
		}
		var all wire.SessionList
		if _, err := c.call(http.MethodGet, "/v1/sessions", nil, &all); err != nil {
			return err
		}
		ids := make([]string, 0, len(all.Sessions))
		for _, s := range all.Sessions {
			ids = append(ids, s.ID)
		}
		recs, err := h.rec.E2BSandboxes(r.Context(), ids)
		if err != nil {
			return err
		}
		out := []sandboxInfo{}
		for _, s := range all.Sessions {
			rec, ok := recs[s.ID]
			if !ok {
				continue
			}
			if h.now().After(rec.EndAt) {
				h.end(r, c, s.ID)
				continue
			}
			in := h.info(s, rec)
			if !states[in.State] || !hasMetadata(in.Metadata, want) {
				continue
			}
			out = append(out, in)
		}
		// A stable order for pages: oldest first, then by id.
		sort.Slice(out, func(i, j int) bool {
			if !out[i].StartedAt.Equal(out[j].StartedAt) {
				return out[i].StartedAt.Before(out[j].StartedAt)
			}
			return out[i].SandboxID < out[j].SandboxID
		})
		if after != "" {
			i := sort.Search(len(out), func(i int) bool { return pageKey(out[i]) > after })
			out = out[i:]
		}
		if paged && len(out) > limit {
			out = out[:limit]
			w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(pageKey(out[limit-1]))))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}

// pageKey orders sandboxes as list sorts them.
func pageKey(in sandboxInfo) string {
	return fmt.Sprintf("%020d/%s", in.StartedAt.UnixNano(), in.SandboxID)
}

// metadataFilter parses E2B's metadata query: key=value pairs joined by &,
// each key and value URL-encoded once more by the SDK.
func metadataFilter(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	vs, err := url.ParseQuery(s)
	if err != nil {
		return nil, errf(http.StatusBadRequest, "metadata filter is not key=value pairs")
	}
	out := map[string]string{}
	for k, v := range vs {
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(v[len(v)-1])
		if err1 != nil || err2 != nil {
			return nil, errf(http.StatusBadRequest, "metadata filter is not URL-encoded")
		}
		out[key] = val
	}
	return out, nil
}

func hasMetadata(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
