package app

import (
	"path/filepath"
	"testing"
)

func TestLoadWithOverrides(t *testing.T) {
	t.Parallel()
	def, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("rel/data")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                      string
		o                         Overrides
		dataDir, listen, storeURL string
	}{
		{name: "none", dataDir: def.DataDir, listen: def.Listen, storeURL: def.Store.URL},
		{name: "all", o: Overrides{DataDir: "rel/data", Listen: "127.0.0.1:9", StoreURL: "postgres://db/x"},
			dataDir: abs, listen: "127.0.0.1:9", storeURL: "postgres://db/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := LoadConfigWith("", tt.o)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DataDir != tt.dataDir || cfg.Listen != tt.listen || cfg.Store.URL != tt.storeURL {
				t.Fatalf("data_dir %q listen %q store.url %q, want %q %q %q", cfg.DataDir, cfg.Listen, cfg.Store.URL, tt.dataDir, tt.listen, tt.storeURL)
			}
		})
	}
	if _, err := LoadConfigWith("", Overrides{Listen: "no port"}); err == nil {
		t.Error("an invalid --listen passed validation")
	}
}
