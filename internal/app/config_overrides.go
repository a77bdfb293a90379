package app

import (
	"fmt"
	"path/filepath"

	"github.com/sandboxapi/sandboxapi/internal/config"
)

// Overrides are the settings a command line or the process environment
// puts over the config file's: an empty field leaves the file's value.
type Overrides struct {
	DataDir  string // --data-dir; made absolute
	Listen   string // --listen
	StoreURL string // SANDBOXAPI_STORE_URL
	// ClusterSecret is SANDBOXAPI_CLUSTER_SECRET (cluster.SecretEnv).
	ClusterSecret string
	// ClusterPreviousSecrets is SANDBOXAPI_CLUSTER_PREVIOUS_SECRETS
	// (cluster.PreviousSecretsEnv) as it is set: secrets separated by
	// commas and/or whitespace (config.SplitSecrets). When it is not empty it
	// replaces cluster.previous_secrets, with what it lists: a value of
	// separators only (",") empties the list.
	ClusterPreviousSecrets string
}

// LoadConfigWith loads path (the embedded default when empty), applies o and
// validates the result (once: a file may leave to o what validation
// needs, such as a cluster node's store URL and secret).
func LoadConfigWith(path string, o Overrides) (*Config, error) {
	cfg, name, err := readConfig(path)
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
	if o.ClusterSecret != "" {
		cfg.Cluster.Secret = o.ClusterSecret
	}
	if o.ClusterPreviousSecrets != "" {
		cfg.Cluster.PreviousSecrets = config.SplitSecrets(o.ClusterPreviousSecrets)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating %s: %w", name, err)
	}
	return cfg, nil
}
