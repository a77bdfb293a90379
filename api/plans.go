package api

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Plan is what a key may do.
type Plan struct {
	Name           string `yaml:"-" json:"name"`
	Sessions       bool   `yaml:"sessions" json:"sessions"`
	MaxSessions    int    `yaml:"max_sessions" json:"max_sessions"`
	Network        bool   `yaml:"network" json:"network"`
	AllowedDomains bool   `yaml:"allowed_domains" json:"allowed_domains"`
	// Credentials lets sessions give network.credentials, headers the
	// egress proxy adds for one host (it needs network).
	Credentials       bool          `yaml:"credentials" json:"credentials"`
	MaxTimeout        time.Duration `yaml:"max_timeout" json:"max_timeout_s"`
	MemoryMB          int64         `yaml:"memory_mb" json:"memory_mb"` // per execution; 0: the executor's default
	RequestsPerMinute int           `yaml:"requests_per_minute" json:"requests_per_minute"`
	// SessionDiskMB is the size of each session's home (its disk limit);
	// 0: the executor's home_size.
	SessionDiskMB int64 `yaml:"session_disk_mb" json:"session_disk_mb"`
}

// maxPlanMemoryMB bounds memory_mb (1 TiB) so the byte count cannot
// overflow; the executor caps it to its own memory limit anyway.
const maxPlanMemoryMB = 1 << 20

// Plans is the plan table, read-only after LoadPlans.
type Plans struct {
	byName map[string]*Plan
	order  []string
}

// LoadPlans parses plans.yaml, rejecting unknown fields.
func LoadPlans(data []byte) (*Plans, error) {
	var doc struct {
		Version string           `yaml:"version"`
		Plans   map[string]*Plan `yaml:"plans"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decoding plans: %w", err)
	}
	var errs []error
	if doc.Version != "v1" {
		errs = append(errs, errors.New("plans: version must be v1"))
	}
	if len(doc.Plans) == 0 {
		errs = append(errs, errors.New("plans: none defined"))
	}
	ps := &Plans{byName: map[string]*Plan{}}
	for name, p := range doc.Plans {
		if p == nil {
			errs = append(errs, fmt.Errorf("plans.%s: empty", name))
			continue
		}
		p.Name = strings.ToUpper(name)
		if p.MaxSessions < 0 || (p.Sessions && p.MaxSessions == 0) {
			errs = append(errs, fmt.Errorf("plans.%s: max_sessions must be positive when sessions are allowed", name))
		}
		if p.MaxTimeout <= 0 {
			errs = append(errs, fmt.Errorf("plans.%s: max_timeout must be positive", name))
		}
		if p.MemoryMB < 0 || p.MemoryMB > maxPlanMemoryMB {
			errs = append(errs, fmt.Errorf("plans.%s: memory_mb must be from 0 (the executor's default) to %d", name, maxPlanMemoryMB))
		}
		if p.SessionDiskMB < 0 || p.SessionDiskMB > maxPlanMemoryMB {
			errs = append(errs, fmt.Errorf("plans.%s: session_disk_mb must be from 0 (the executor's home_size) to %d", name, maxPlanMemoryMB))
		} else if p.SessionDiskMB > 0 && p.SessionDiskMB < 16 {
			errs = append(errs, fmt.Errorf("plans.%s: session_disk_mb must be at least 16", name))
		}
		if p.RequestsPerMinute <= 0 {
			errs = append(errs, fmt.Errorf("plans.%s: requests_per_minute must be positive", name))
		}
		if p.AllowedDomains && !p.Network {
			errs = append(errs, fmt.Errorf("plans.%s: allowed_domains needs network", name))
		}
		if p.Credentials && !p.Network {
			errs = append(errs, fmt.Errorf("plans.%s: credentials needs network", name))
		}
		ps.byName[p.Name] = p
		ps.order = append(ps.order, p.Name)
	}
	sort.Slice(ps.order, func(i, j int) bool {
		a, b := ps.byName[ps.order[i]], ps.byName[ps.order[j]]
		if a.MaxSessions != b.MaxSessions {
			return a.MaxSessions < b.MaxSessions
		}
		return a.Name < b.Name
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ps, nil
}

// Get returns a plan by name, ignoring case.
func (ps *Plans) Get(name string) (*Plan, bool) {
	p, ok := ps.byName[strings.ToUpper(name)]
	return p, ok
}

// Names lists the plans from smallest to largest.
func (ps *Plans) Names() []string { return append([]string(nil), ps.order...) }

// cheapestWith names the smallest plan for which has is true, for 403
// messages that tell the client what to upgrade to.
func (ps *Plans) cheapestWith(has func(*Plan) bool) string {
	for _, n := range ps.order {
		if has(ps.byName[n]) {
			return n
		}
	}
	return ""
}
