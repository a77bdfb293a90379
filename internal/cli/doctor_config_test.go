package cli

import (
	"reflect"
	"slices"
	"testing"

	"github.com/sandboxapi/sandboxapi/doctor"
	"github.com/sandboxapi/sandboxapi/internal/app"
	"github.com/sandboxapi/sandboxapi/tlsserve"
)

// TestDoctorConfig: doctor gets every setting it checks from the config,
// each from its own field, and none is left at its zero value (a field
// added to doctor.Config and not filled here fails).
func TestDoctorConfig(t *testing.T) {
	t.Parallel()
	cfg, err := app.ParseConfig([]byte(`
version: v1
listen: 127.0.0.1:9999
data_dir: /srv/sbx
store:
  url: postgres://db.example/sbx
executor:
  runsc: /opt/runsc
  platform: ptrace
  rootfs: /srv/rootfs
  guest_binary: /opt/sandboxapi-guest
  home_size: 512M
  max_sandboxes: 7
  max_disk: 20G
egress:
  enabled: true
  resolvers: [192.0.2.53]
tls:
  mode: files
  cert_file: /etc/sbx/cert.pem
  key_file: /etc/sbx/key.pem
  storage_dir: certs
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	got := doctorConfig(cfg)
	want := &doctor.Config{
		DataDir: "/srv/sbx", Listen: "127.0.0.1:9999",
		Runsc: "/opt/runsc", Platform: "ptrace", Rootfs: "/srv/rootfs", GuestBinary: "/opt/sandboxapi-guest",
		HomeSize: "512M", MaxSandboxes: 7, MaxDisk: "20G",
		StoreURL: "postgres://db.example/sbx", EgressEnabled: true,
		TLS: doctor.TLS{Mode: "files", CertFile: "/etc/sbx/cert.pem", KeyFile: "/etc/sbx/key.pem", StorageDir: cfg.TLS.Storage("/srv/sbx")},
	}
	// The runtimes file's versions, each with its PATH and commands.
	for _, r := range got.Runtimes {
		if r.Language == "javascript" && r.Version == "22" {
			want.Runtimes = got.Runtimes
			if r.Path[0] != "/opt/node/22/node_modules/.bin" || !slices.Equal(r.Programs, []string{"node"}) || r.EOL.IsZero() {
				t.Errorf("javascript 22 as doctor checks it: %+v", r)
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("doctorConfig =\n%+v\nwant\n%+v", got, want)
	}
	var zero func(v reflect.Value, name string)
	zero = func(v reflect.Value, name string) {
		for i := range v.NumField() {
			f, n := v.Field(i), name+v.Type().Field(i).Name
			if f.Kind() == reflect.Struct {
				zero(f, n+".")
			} else if f.IsZero() {
				t.Errorf("doctor.Config.%s is not filled", n)
			}
		}
	}
	zero(reflect.ValueOf(*got), "")
	// doctor compares the mode with tlsserve's words without importing it.
	if tlsserve.ModeOff != "off" || tlsserve.ModeFiles != "files" {
		t.Errorf("tlsserve's modes are %q and %q; doctor's checkTLS says off and files", tlsserve.ModeOff, tlsserve.ModeFiles)
	}
}
