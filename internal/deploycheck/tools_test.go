package deploycheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// testTools is where scripts/k8s-tools.sh installs by default; the
// SANDBOXAPI_* variables it prints override each path.
const testTools = "/var/cache/sandboxapi/testtools"

// kubeDir is deploy/kubernetes in this module.
func kubeDir() string { return filepath.Join(testenv.ModuleRoot(), "deploy", "kubernetes") }

// kustomizations lists every folder under deploy/kubernetes that holds a
// kustomization, relative to it ("base", "overlays/example").
func kustomizations(t *testing.T) []string {
	t.Helper()
	var out []string
	root := kubeDir()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (d.Name() == "kustomization.yaml" || d.Name() == "kustomization.yml") {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	if len(out) < 2 {
		t.Fatalf("want the base and at least one overlay under %s, found %v", root, out)
	}
	return out
}

// renderer returns the command that renders a kustomization folder given
// as its last argument: $SANDBOXAPI_KUSTOMIZE build, `kubectl kustomize`,
// or the kustomize scripts/k8s-tools.sh installs where kubectl is missing.
// It skips (fails when SANDBOXAPI_REQUIRE_RUNSC=1) when there is none.
func renderer(t *testing.T) []string {
	t.Helper()
	if k := os.Getenv("SANDBOXAPI_KUSTOMIZE"); k != "" {
		return []string{k, "build"}
	}
	if k, err := exec.LookPath("kubectl"); err == nil {
		return []string{k, "kustomize"}
	}
	if k := filepath.Join(testTools, "bin", "kustomize"); isExec(k) {
		return []string{k, "build"}
	}
	testenv.Skip(t, "no kubectl or kustomize: run scripts/k8s-tools.sh (eval its output)")
	return nil
}

// validator returns kubeconform and the schema folders, one per
// Kubernetes version, oldest first ($SANDBOXAPI_K8S_SCHEMAS, a path list,
// or every folder scripts/k8s-tools.sh left in the default place), or
// skips (fails when SANDBOXAPI_REQUIRE_RUNSC=1).
func validator(t *testing.T) (kubeconform string, schemas []string) {
	t.Helper()
	kubeconform = os.Getenv("SANDBOXAPI_KUBECONFORM")
	if kubeconform == "" {
		kubeconform = filepath.Join(testTools, "bin", "kubeconform")
	}
	if !isExec(kubeconform) {
		testenv.Skip(t, "no kubeconform at %s: run scripts/k8s-tools.sh (eval its output)", kubeconform)
	}
	if env := os.Getenv("SANDBOXAPI_K8S_SCHEMAS"); env != "" {
		schemas = filepath.SplitList(env)
	} else {
		found, _ := filepath.Glob(filepath.Join(testTools, "k8s-schemas", "*", DefinitionsFile))
		for _, f := range found {
			schemas = append(schemas, filepath.Dir(f))
		}
		sort.Slice(schemas, func(i, j int) bool { return versionLess(filepath.Base(schemas[i]), filepath.Base(schemas[j])) })
	}
	if len(schemas) == 0 {
		testenv.Skip(t, "no Kubernetes schemas: run scripts/k8s-tools.sh (eval its output)")
	}
	for _, dir := range schemas {
		if _, err := os.Stat(filepath.Join(dir, DefinitionsFile)); err != nil {
			testenv.Skip(t, "no Kubernetes schemas in %s: run scripts/k8s-tools.sh (eval its output)", dir)
		}
	}
	return kubeconform, schemas
}

// versionLess orders "v1.35.4" before "v1.37.2" (numerically).
func versionLess(a, b string) bool {
	pa, pb := strings.Split(strings.TrimPrefix(a, "v"), "."), strings.Split(strings.TrimPrefix(b, "v"), ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, _ := strconv.Atoi(pa[i])
		nb, _ := strconv.Atoi(pb[i])
		if na != nb {
			return na < nb
		}
	}
	return len(pa) < len(pb)
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// renders keeps each folder's render for the test process (kubectl's
// kustomize takes seconds).
var renders sync.Map // dir -> []byte

// render runs the renderer on dir and returns the YAML stream.
func render(t *testing.T, dir string) ([]byte, error) {
	t.Helper()
	if b, ok := renders.Load(dir); ok {
		return b.([]byte), nil
	}
	args := append(renderer(t), dir)
	var out, errw bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errw
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, errw.Bytes())
	}
	renders.Store(dir, out.Bytes())
	return out.Bytes(), nil
}

// validation is kubeconform's verdict on one stream.
type validation struct {
	Resources []struct {
		Filename string `json:"filename"`
		Kind     string `json:"kind"`
		Name     string `json:"name"`
		Version  string `json:"version"`
		Status   string `json:"status"`
		Msg      string `json:"msg"`
	} `json:"resources"`
	Summary struct {
		Valid, Invalid, Errors, Skipped int
	} `json:"summary"`
}

// problems lists every resource that did not validate, one line each.
func (v validation) problems() []string {
	var out []string
	for _, r := range v.Resources {
		if r.Status != "statusValid" {
			out = append(out, fmt.Sprintf("%s %s (%s): %s: %s", r.Kind, r.Name, r.Version, r.Status, r.Msg))
		}
	}
	return out
}

// validate runs kubeconform, strict and offline, on a YAML stream against
// the oldest Kubernetes version's schemas. The error is kubeconform
// failing to run at all; a stream that does not validate comes back as
// problems.
func validate(t *testing.T, stream []byte) (validation, error) {
	t.Helper()
	kubeconform, schemas := validator(t)
	return validateWith(kubeconform, schemas[0], stream)
}

// validateWith runs kubeconform with the schemas in dir.
func validateWith(kubeconform, dir string, stream []byte) (validation, error) {
	cmd := exec.Command(kubeconform,
		"-strict",              // duplicate keys are errors (unknown fields are, by the schemas)
		"-summary", "-verbose", // every resource's verdict, not only failures
		"-output", "json",
		"-schema-location", filepath.Join(dir, SchemaTemplate),
		"-")
	cmd.Stdin = bytes.NewReader(stream)
	var out, errw bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errw
	runErr := cmd.Run()
	var v validation
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		return v, fmt.Errorf("kubeconform: %v (%v): %s%s", runErr, err, out.Bytes(), errw.Bytes())
	}
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return v, runErr
	}
	if (runErr == nil) != (len(v.problems()) == 0) {
		return v, fmt.Errorf("kubeconform exited %v with %d problems: %s", runErr, len(v.problems()), out.Bytes())
	}
	return v, nil
}

// object is one decoded manifest.
type object map[string]any

// decode splits a YAML stream into objects.
func decode(t *testing.T, stream []byte) []object {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(stream))
	var out []object
	for {
		// Into a plain map: yaml.v3 gives nested maps the type of the
		// outer one.
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decoding rendered YAML: %v", err)
		}
		if o != nil {
			out = append(out, object(o))
		}
	}
}

// encode joins objects into a YAML stream.
func encode(t *testing.T, objs []object) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, o := range objs {
		b.WriteString("---\n")
		enc := yaml.NewEncoder(&b)
		if err := enc.Encode(map[string]any(o)); err != nil {
			t.Fatal(err)
		}
		enc.Close()
	}
	return b.Bytes()
}

func (o object) kind() string { s, _ := o["kind"].(string); return s }

func (o object) name() string { s, _ := get(o, "metadata", "name").(string); return s }

func (o object) namespace() string { s, _ := get(o, "metadata", "namespace").(string); return s }

// get walks maps by key and lists by int index; nil when a step is missing.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				if o, isObj := v.(object); isObj {
					m, ok = map[string]any(o), true
				}
			}
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// list is get for a list ([] when missing).
func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
