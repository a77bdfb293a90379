package api

// Settings is the `api:` section of sandboxapi.yaml: data only.
// internal/app's Config decodes it and calls Validate.
type Settings struct {
	PlansFile string `yaml:"plans_file"`
	// GatewaySecret, when set, accepts only requests from a RapidAPI-style
	// gateway carrying it in X-RapidAPI-Proxy-Secret.
	GatewaySecret string `yaml:"gateway_secret"`
}

// Validate reports problems of the section: every value is accepted today
// (an empty plans_file is the embedded plans, an empty secret no gateway).
func (s Settings) Validate() error { return nil }
