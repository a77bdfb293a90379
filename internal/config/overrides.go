package config

import (
	"fmt"
	"path/filepath"
)

// Overrides are the settings a command line or the process environment
// puts over the config file's: an empty field leaves the file's value.
type Overrides struct {
	DataDir  string // --data-dir; made absolute
	Listen   string // --listen
	StoreURL string // SANDBOXAPI_STORE_URL
}

// LoadWith loads path (the embedded default when empty), applies o and
// validates the result.
func LoadWith(path string, o Overrides) (*Config, error) {
	cfg, err := Load(path)
	if err != nil {
		return nil, err
	}
	if o.DataDir != "" {
		abs, err := filepath.Abs(o.DataDir)
		if err != nil {
			return nil, fmt.Errorf("resolving --data-dir: %w", err)
		}
		cfg.DataDir = abs
	}
	if o.Listen != "" {
		cfg.Listen = o.Listen
	}
	if o.StoreURL != "" {
		cfg.Store.URL = o.StoreURL
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}
