package mirror

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/redact"
)

// get fetches u with at most limit bytes of body. Its errors name u
// without userinfo or query values (redact.URL): the configured index URL
// may carry a credential, and these errors reach CLI output and logs.
func (m *Mirror) get(ctx context.Context, u, accept string, limit int64) ([]byte, error) {
	shown := redact.URL(u)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: building request for %s: %w", ErrUpstream, shown, redact.Err(err))
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	req.Header.Set("User-Agent", "sandboxapi-mirror")
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: fetching %s: %w", ErrUpstream, shown, redact.Err(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("fetching %s: %w", shown, ErrNotFound)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: fetching %s: status %s", ErrUpstream, shown, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %w", ErrUpstream, shown, redact.Err(err))
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrUpstream, shown, limit)
	}
	return b, nil
}

type pep691Project struct {
	Files []struct {
		Filename string            `json:"filename"`
		URL      string            `json:"url"`
		Hashes   map[string]string `json:"hashes"`
		Yanked   any               `json:"yanked"`
	} `json:"files"`
}

// pipProject reads name's page from the upstream simple index (PEP 691
// JSON) at Config.PipIndexURL. That index is the only place "mirror add
// pip" downloads from; when it cannot be reached the error says so and
// what to do instead.
func (m *Mirror) pipProject(ctx context.Context, name string) (pep691Project, *url.URL, error) {
	base, err := url.Parse(strings.TrimSuffix(m.cfg.PipIndexURL, "/") + "/" + NormalizePyPI(name) + "/")
	if err != nil {
		return pep691Project{}, nil, fmt.Errorf("%w: bad pip index url: %w", ErrUpstream, redact.Err(err))
	}
	page, err := m.get(ctx, base.String(), "application/vnd.pypi.simple.v1+json", 64<<20)
	if err != nil {
		if errors.Is(err, ErrUpstream) {
			return pep691Project{}, nil, fmt.Errorf("the pip index %s (mirror.pip_index_url, a PEP 691 JSON simple index) could not be used: %w; "+
				"point pip_index_url at an index this host reaches, or download the wheels elsewhere and add each with `mirror add FILE.whl`", redact.URL(m.cfg.PipIndexURL), err)
		}
		return pep691Project{}, nil, err
	}
	var proj pep691Project
	if err := json.Unmarshal(page, &proj); err != nil {
		return pep691Project{}, nil, fmt.Errorf("%w: parsing index page for %s (not PEP 691 JSON?): %w", ErrUpstream, name, err)
	}
	return proj, base, nil
}

// AddPip fetches the wheels of spec from the upstream simple index (PEP 691
// JSON) whose platform tag matches Config.PipPlatforms, verifies each
// against the index's sha256 and admits it. When only source distributions
// exist, the request is refused with that reason.
func (m *Mirror) AddPip(ctx context.Context, spec Spec, accept []string) ([]Artifact, error) {
	return m.AddPipHashes(ctx, spec, nil, accept)
}

// AddPipHashes is AddPip for a requirements file line with --hash values:
// when hashes (sha256 hex) are given, only wheels with one of them are
// fetched and admitted, as pip's hash-checking mode would install.
func (m *Mirror) AddPipHashes(ctx context.Context, spec Spec, hashes []string, accept []string) ([]Artifact, error) {
	proj, base, err := m.pipProject(ctx, spec.Name)
	if err != nil {
		return nil, fmt.Errorf("adding %s: %w", spec, err)
	}
	hashOK := func(h string) bool {
		if len(hashes) == 0 {
			return true
		}
		for _, x := range hashes {
			if strings.EqualFold(x, h) {
				return true
			}
		}
		return false
	}
	var unhashed []string
	var out []Artifact
	var errs []error
	sdists := 0
	for _, f := range proj.Files {
		fn := path.Base(f.Filename)
		if !strings.HasSuffix(fn, ".whl") {
			if IsSdistFilename(fn) {
				if _, v := guessPipName(fn); versionEqual(Pip, v, spec.Version) {
					sdists++
				}
			}
			continue
		}
		w, err := ParseWheelFilename(fn)
		if err != nil || !versionEqual(Pip, w.Version, spec.Version) || !m.platformWanted(w.Platform) {
			continue
		}
		want := strings.ToLower(f.Hashes["sha256"])
		if len(want) != 64 {
			errs = append(errs, fmt.Errorf("%w: index lists %s without a sha256", ErrUpstream, fn))
			continue
		}
		if !hashOK(want) {
			unhashed = append(unhashed, fn)
			continue
		}
		fu, err := base.Parse(f.URL)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: bad url for %s: %w", ErrUpstream, fn, redact.Err(err)))
			continue
		}
		fu.Fragment = ""
		data, err := m.get(ctx, fu.String(), "", m.cfg.Limits.MaxArtifactBytes)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != want {
			got := hex.EncodeToString(sum[:])
			m.auditUpstreamMismatch(ctx, Artifact{Manager: Pip, Name: spec.Name, Version: spec.Version, Filename: fn, SHA256: got, Source: redact.Origin(fu.String())},
				fmt.Sprintf("upstream bytes hash to sha256 %s, the index says %s", got, want))
			errs = append(errs, fmt.Errorf("%w: %s does not match the index's sha256", ErrUpstream, fn))
			continue
		}
		a, err := m.AddWheel(ctx, fn, data, redact.Origin(fu.String()), accept)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, a)
	}
	if len(out) == 0 && len(errs) == 0 {
		if len(unhashed) > 0 {
			return nil, fmt.Errorf("adding %s: no wheel matches the requirement's --hash values (the index has %s): %w", spec, strings.Join(unhashed, ", "), ErrNotFound)
		}
		if sdists > 0 {
			c := candidate{a: Artifact{Manager: Pip, Name: spec.Name, Version: spec.Version, Filename: spec.Name + "-" + spec.Version + ".tar.gz", Source: redact.Origin(base.String())},
				problem: refusef("%s has only a source distribution upstream: only wheels are admitted", spec)}
			_, err := m.admit(ctx, c, accept)
			return nil, err
		}
		return nil, fmt.Errorf("adding %s: no wheel for the configured platforms: %w", spec, ErrNotFound)
	}
	return out, errors.Join(errs...)
}

func (m *Mirror) platformWanted(tag string) bool {
	for _, t := range strings.Split(tag, ".") {
		for _, p := range m.cfg.PipPlatforms {
			if ok, _ := path.Match(p, t); ok {
				return true
			}
		}
	}
	return false
}

type npmPackument struct {
	DistTags map[string]string `json:"dist-tags"`
	Versions map[string]struct {
		Deprecated any `json:"deprecated"`
		Dist       struct {
			Tarball   string `json:"tarball"`
			Integrity string `json:"integrity"`
			Shasum    string `json:"shasum"`
		} `json:"dist"`
	} `json:"versions"`
	Time map[string]string `json:"time"`
}

func (m *Mirror) npmPackument(ctx context.Context, name string) (*npmPackument, error) {
	u := strings.TrimSuffix(m.cfg.NPMRegistryURL, "/") + "/" + strings.Replace(name, "/", "%2f", 1)
	page, err := m.get(ctx, u, "application/json", 256<<20)
	if err != nil {
		return nil, err
	}
	var p npmPackument
	if err := json.Unmarshal(page, &p); err != nil {
		return nil, fmt.Errorf("%w: parsing packument of %s: %w", ErrUpstream, name, err)
	}
	return &p, nil
}

// AddNPM fetches spec from the upstream registry, verifies the tarball
// against the registry's dist.integrity (sha512; sha1 shasum only when no
// integrity is published), then sanitises and admits it. The version's
// upstream publish time is kept for the packument.
func (m *Mirror) AddNPM(ctx context.Context, spec Spec, accept []string) (Artifact, error) {
	return m.AddNPMLocked(ctx, spec, "", accept)
}

// AddNPMLocked is AddNPM for a package-lock.json entry: the tarball must
// also match integrity (an SRI string, sha512 or sha1), the lockfile's.
func (m *Mirror) AddNPMLocked(ctx context.Context, spec Spec, integrity string, accept []string) (Artifact, error) {
	p, err := m.npmPackument(ctx, spec.Name)
	if err != nil {
		return Artifact{}, fmt.Errorf("adding %s: %w", spec, err)
	}
	v, ok := p.Versions[spec.Version]
	if !ok {
		return Artifact{}, fmt.Errorf("adding %s: version not in registry: %w", spec, ErrNotFound)
	}
	tu, err := url.Parse(v.Dist.Tarball)
	if err != nil || (tu.Scheme != "http" && tu.Scheme != "https") {
		return Artifact{}, fmt.Errorf("%w: bad tarball url %q", ErrUpstream, redact.URL(v.Dist.Tarball))
	}
	data, err := m.get(ctx, tu.String(), "", m.cfg.Limits.MaxArtifactBytes)
	if err != nil {
		return Artifact{}, fmt.Errorf("adding %s: %w", spec, err)
	}
	check := checkIntegrity(data, v.Dist.Integrity, v.Dist.Shasum)
	if check == nil && integrity != "" && !matchSRI(data, integrity) {
		check = fmt.Errorf("%w: tarball does not match the lockfile's integrity %s", ErrUpstream, truncate(integrity, 30))
	}
	if check != nil {
		sum := sha256.Sum256(data)
		m.auditUpstreamMismatch(ctx, Artifact{Manager: NPM, Name: spec.Name, Version: spec.Version, Filename: path.Base(tu.Path),
			SHA256: hex.EncodeToString(sum[:]), Source: redact.Origin(tu.String())}, check.Error())
		return Artifact{}, fmt.Errorf("adding %s: %w", spec, check)
	}
	var published time.Time
	if t, err := time.Parse(time.RFC3339Nano, p.Time[spec.Version]); err == nil {
		published = t.UTC()
	}
	return m.addNPM(ctx, data, redact.Origin(tu.String()), accept, spec, published)
}

// matchSRI reports whether data matches one of the sha512 or sha1 entries
// of an SRI string (the strongest algorithm present decides).
func matchSRI(data []byte, sri string) bool {
	want := map[string][]string{}
	for _, part := range strings.Fields(sri) {
		algo, val, _ := strings.Cut(part, "-")
		val, _, _ = strings.Cut(val, "?")
		want[algo] = append(want[algo], val)
	}
	var got string
	var vals []string
	switch {
	case len(want["sha512"]) > 0:
		s := sha512.Sum512(data)
		got, vals = base64.StdEncoding.EncodeToString(s[:]), want["sha512"]
	case len(want["sha1"]) > 0:
		s := sha1.Sum(data)
		got, vals = base64.StdEncoding.EncodeToString(s[:]), want["sha1"]
	default:
		return false
	}
	for _, v := range vals {
		if v == got {
			return true
		}
	}
	return false
}

// checkIntegrity verifies an SRI string (any sha512 entry must match) or,
// lacking one, a sha1 hex shasum.
func checkIntegrity(data []byte, integrity, shasum string) error {
	if integrity != "" {
		s512 := sha512.Sum512(data)
		want := base64.StdEncoding.EncodeToString(s512[:])
		seen := false
		for _, part := range strings.Fields(integrity) {
			algo, val, _ := strings.Cut(part, "-")
			if algo != "sha512" {
				continue
			}
			seen = true
			if val, _, _ = strings.Cut(val, "?"); val == want {
				return nil
			}
		}
		if seen {
			return fmt.Errorf("%w: tarball does not match the registry's sha512 integrity", ErrUpstream)
		}
	}
	if shasum != "" {
		s1 := sha1.Sum(data)
		if hex.EncodeToString(s1[:]) == strings.ToLower(shasum) {
			return nil
		}
		return fmt.Errorf("%w: tarball does not match the registry's shasum", ErrUpstream)
	}
	return fmt.Errorf("%w: registry publishes no sha512 integrity or shasum", ErrUpstream)
}

// auditUpstreamMismatch records bytes from upstream that do not match what
// the upstream index promised: nothing is stored, but an operator must be
// able to see that it happened (a tampered mirror or a man in the middle).
func (m *Mirror) auditUpstreamMismatch(ctx context.Context, a Artifact, reason string) {
	a.OSVSnapshot = m.loadedSnapshot(ctx)
	if err := m.audit(ctx, m.entry(AuditRefusal, a, "upstream mismatch: "+reason)); err != nil {
		m.log.Error("recording upstream mismatch", "filename", a.Filename, "err", err)
	}
}
