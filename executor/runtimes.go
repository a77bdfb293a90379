package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Runtime is one language: where its code goes and how it is built and run.
type Runtime struct {
	Name    string   `yaml:"-" json:"language"`
	Aliases []string `yaml:"aliases" json:"aliases"`
	File    string   `yaml:"file" json:"file"`
	Compile []string `yaml:"compile" json:"-"`
	// InlineCompile: the run step compiles the code itself and says so on
	// fd 3 (guest.Request.InlineCompile); compile failures are still
	// compile_error.
	InlineCompile bool     `yaml:"inline_compile" json:"-"`
	Run           []string `yaml:"run" json:"-"`
	Env           []string `yaml:"env" json:"-"`
	// Links are symlinks made beside the code (name -> absolute target).
	Links    map[string]string `yaml:"links" json:"-"`
	Version  string            `yaml:"-" json:"version"`
	Compiled bool              `yaml:"-" json:"compiled"`
}

// Runtimes is the language table. The zero value has no languages; it is
// read-only after LoadRuntimes and safe for concurrent use.
type Runtimes struct {
	byName map[string]*Runtime
	list   []*Runtime
}

// LoadRuntimes parses a runtimes.yaml and attaches versions read from the
// rootfs build (versions.json beside the rootfs folder), if present.
func LoadRuntimes(data []byte, versionsFile string) (*Runtimes, error) {
	var doc struct {
		Version  string              `yaml:"version"`
		Runtimes map[string]*Runtime `yaml:"runtimes"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decoding runtimes: %w", err)
	}
	var errs []error
	if doc.Version != "v1" {
		errs = append(errs, fmt.Errorf("runtimes: version must be v1"))
	}
	versions := map[string]string{}
	if versionsFile != "" {
		if b, err := os.ReadFile(versionsFile); err == nil {
			if err := json.Unmarshal(b, &versions); err != nil {
				errs = append(errs, fmt.Errorf("decoding %s: %w", versionsFile, err))
			}
		}
	}
	rs := &Runtimes{byName: map[string]*Runtime{}}
	names := make([]string, 0, len(doc.Runtimes))
	for n := range doc.Runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := doc.Runtimes[n]
		if r == nil {
			errs = append(errs, fmt.Errorf("runtimes.%s: empty", n))
			continue
		}
		r.Name = n
		r.Compiled = len(r.Compile) > 0 || r.InlineCompile
		r.Version = versions[n]
		if r.File == "" || filepath.Base(r.File) != r.File || len(r.Run) == 0 {
			errs = append(errs, fmt.Errorf("runtimes.%s: needs a plain file name and a run step", n))
		}
		for _, key := range append([]string{n}, r.Aliases...) {
			key = strings.ToLower(key)
			if _, dup := rs.byName[key]; dup {
				errs = append(errs, fmt.Errorf("runtimes: name %q used twice", key))
			}
			rs.byName[key] = r
		}
		rs.list = append(rs.list, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rs, nil
}

// Lookup finds a language by name or alias, ignoring case.
func (rs *Runtimes) Lookup(name string) (*Runtime, error) {
	if r, ok := rs.byName[strings.ToLower(strings.TrimSpace(name))]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownLanguage, name)
}

// List returns every language, sorted by name.
func (rs *Runtimes) List() []Runtime {
	out := make([]Runtime, len(rs.list))
	for i, r := range rs.list {
		out[i] = *r
	}
	return out
}

// RuntimeList describes every language for clients.
func (e *Executor) RuntimeList() []sandbox.Runtime {
	list := e.rt.List()
	out := make([]sandbox.Runtime, len(list))
	for i, r := range list {
		aliases := r.Aliases
		if aliases == nil {
			aliases = []string{}
		}
		out[i] = sandbox.Runtime{Language: r.Name, Aliases: aliases, Version: r.Version, Compiled: r.Compiled}
	}
	return out
}
