package deploycheck

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// rendered is one kustomization's output.
type rendered struct {
	dir  string // relative to deploy/kubernetes
	objs []object
	raw  []byte
}

// renderAll renders every kustomization under deploy/kubernetes.
func renderAll(t *testing.T) []rendered {
	t.Helper()
	var out []rendered
	for _, dir := range kustomizations(t) {
		raw, err := render(t, filepath.Join(kubeDir(), dir))
		if err != nil {
			t.Fatalf("%s does not render: %v", dir, err)
		}
		objs := decode(t, raw)
		if len(objs) == 0 {
			t.Fatalf("%s renders nothing", dir)
		}
		out = append(out, rendered{dir: dir, objs: objs, raw: raw})
	}
	return out
}

// TestManifestsValidate renders every kustomization under deploy/kubernetes
// and validates what it renders against the Kubernetes API's schemas of
// every version scripts/k8s-tools.sh provides (the oldest and the newest
// the manifests are meant for; strict: unknown fields, wrong types, kinds
// or apiVersions the API does not have are errors).
func TestManifestsValidate(t *testing.T) {
	kubeconform, schemas := validator(t)
	for _, r := range renderAll(t) {
		for _, dir := range schemas {
			t.Run(r.dir+"@"+filepath.Base(dir), func(t *testing.T) {
				v, err := validateWith(kubeconform, dir, r.raw)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range v.problems() {
					t.Error(p)
				}
				if v.Summary.Valid != len(r.objs) {
					t.Errorf("%d of %d resources valid", v.Summary.Valid, len(r.objs))
				}
				t.Logf("%d resources valid", v.Summary.Valid)
			})
		}
	}
}

// TestValidationRejectsBrokenManifests shows the check bites: the example
// overlay's render, broken one way at a time, fails validation, and the
// same render unbroken passes.
func TestValidationRejectsBrokenManifests(t *testing.T) {
	raw, err := render(t, filepath.Join(kubeDir(), "overlays", "example"))
	if err != nil {
		t.Fatal(err)
	}
	podSpec := func(objs []object) map[string]any {
		for _, o := range objs {
			if o.kind() == "DaemonSet" {
				return get(o, "spec", "template", "spec").(map[string]any)
			}
		}
		t.Fatal("no DaemonSet in the example")
		return nil
	}
	tests := []struct {
		name   string
		break_ func(objs []object)
		want   string // in kubeconform's message
	}{
		{"unknown field in a container", func(objs []object) {
			podSpec(objs)["containers"].([]any)[0].(map[string]any)["privilegd"] = true
		}, "privilegd"},
		{"unknown field in a probe", func(objs []object) {
			c := podSpec(objs)["containers"].([]any)[0].(map[string]any)
			c["readinessProbe"].(map[string]any)["httpGet"].(map[string]any)["pathh"] = "/readyz"
		}, "pathh"},
		{"string where an integer goes", func(objs []object) {
			podSpec(objs)["terminationGracePeriodSeconds"] = "120"
		}, "terminationGracePeriodSeconds"},
		{"object where a list goes", func(objs []object) {
			podSpec(objs)["volumes"] = map[string]any{"name": "data"}
		}, "volumes"},
		{"a boolean as a port", func(objs []object) {
			for _, o := range objs {
				if o.kind() == "Service" {
					get(o, "spec", "ports", 0).(map[string]any)["port"] = true
					return
				}
			}
		}, "port"},
		{"an apiVersion this Kubernetes does not serve", func(objs []object) {
			for _, o := range objs {
				if o.kind() == "PodDisruptionBudget" {
					o["apiVersion"] = "policy/v1beta1"
				}
			}
		}, "PodDisruptionBudget"},
		{"a kind that does not exist", func(objs []object) {
			objs[0]["kind"] = "DaemonSett"
		}, "DaemonSett"},
	}
	// One kubeconform run: the example as it is, and beside it each
	// broken object under a name of its own.
	orig := decode(t, raw)
	stream := append([]object(nil), orig...)
	for i, tt := range tests {
		objs := decode(t, raw)
		tt.break_(objs)
		var changed []object
		for j := range objs {
			if string(encode(t, objs[j:j+1])) != string(encode(t, orig[j:j+1])) {
				changed = append(changed, objs[j])
			}
		}
		if len(changed) != 1 {
			t.Fatalf("%s: breaks %d objects, want 1", tt.name, len(changed))
		}
		changed[0]["metadata"].(map[string]any)["name"] = fmt.Sprintf("broken-%d", i)
		stream = append(stream, changed[0])
	}
	v, err := validate(t, encode(t, stream))
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{}
	for _, p := range v.problems() {
		refused[p] = ""
	}
	for i, tt := range tests {
		name := fmt.Sprintf(" broken-%d ", i)
		var hit []string
		for p := range refused {
			if strings.Contains(p, name) {
				hit = append(hit, p)
				delete(refused, p)
			}
		}
		switch {
		case len(hit) != 1:
			t.Errorf("%s: not refused", tt.name)
		case !strings.Contains(hit[0], tt.want):
			t.Errorf("%s: refused, but the message does not name %q: %s", tt.name, tt.want, hit[0])
		default:
			t.Logf("%s: %s", tt.name, hit[0])
		}
	}
	for p := range refused {
		t.Errorf("the unbroken example is refused: %s", p)
	}
	if v.Summary.Valid != len(orig) {
		t.Errorf("%d valid, want the %d objects of the example", v.Summary.Valid, len(orig))
	}
}

// TestBrokenKustomizationFails runs a deliberately broken manifest through
// the same path as the real ones (a kustomization on disk, rendered, then
// validated): it renders and is refused.
func TestBrokenKustomizationFails(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "kustomization.yaml"), "resources:\n  - service.yaml\n")
	write(t, filepath.Join(dir, "service.yaml"), `apiVersion: v1
kind: Service
metadata:
  name: broken
spec:
  selector:
    app: x
  ports:
    - port: "eighty"
      targetPrt: http
`)
	raw, err := render(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	v, err := validate(t, raw)
	if err != nil {
		t.Fatal(err)
	}
	p := v.problems()
	if len(p) != 1 || !strings.Contains(p[0], "targetPrt") || !strings.Contains(p[0], "/spec/ports/0/port") {
		t.Fatalf("want the Service refused for targetPrt and its port, got %q", p)
	}
}

// TestManifestReferences checks what the schemas cannot: everything a pod
// names (config maps, secrets and their keys, claims, service account,
// volumes) is in the same render and namespace, and every selector
// (workloads, Services, NetworkPolicies, PodDisruptionBudgets) selects a
// pod template, on ports its containers have. The base may leave out the
// Secret "sandboxapi": overlays make it.
func TestManifestReferences(t *testing.T) {
	for _, r := range renderAll(t) {
		t.Run(r.dir, func(t *testing.T) {
			for _, p := range references(r) {
				t.Error(p)
			}
		})
	}
}

// TestReferenceCheckBites shows the reference check refuses a render
// whose Secret is in another namespace (kustomize then leaves the pods'
// references unresolved) and a Service whose selector matches no pod.
func TestReferenceCheckBites(t *testing.T) {
	raw, err := render(t, filepath.Join(kubeDir(), "overlays", "example"))
	if err != nil {
		t.Fatal(err)
	}
	if p := references(rendered{dir: "overlays/example", objs: decode(t, raw)}); len(p) != 0 {
		t.Fatalf("the example itself: %q", p)
	}
	objs := decode(t, raw)
	for _, o := range objs {
		switch o.kind() {
		case "Secret":
			o["metadata"].(map[string]any)["namespace"] = "default"
		case "Service":
			if o.name() == "sandboxapi" {
				get(o, "spec", "selector").(map[string]any)["app.kubernetes.io/component"] = "nodes"
			}
		}
	}
	p := strings.Join(references(rendered{dir: "overlays/example", objs: objs}), "\n")
	for _, want := range []string{"Secret sandboxapi-", "Service sandboxapi selects no pod"} {
		if !strings.Contains(p, want) {
			t.Errorf("no problem naming %q in:\n%s", want, p)
		}
	}
}

// workload is a pod template and where it is from.
type workload struct {
	obj    object
	labels map[string]any
	spec   map[string]any
}

func workloads(objs []object) []workload {
	var out []workload
	for _, o := range objs {
		var tmpl any
		switch o.kind() {
		case "DaemonSet", "Deployment", "StatefulSet", "Job":
			tmpl = get(o, "spec", "template")
		case "CronJob":
			tmpl = get(o, "spec", "jobTemplate", "spec", "template")
		default:
			continue
		}
		labels, _ := get(tmpl, "metadata", "labels").(map[string]any)
		spec, _ := get(tmpl, "spec").(map[string]any)
		out = append(out, workload{obj: o, labels: labels, spec: spec})
	}
	return out
}

// containers lists a pod spec's init containers and containers.
func containers(spec map[string]any) []map[string]any {
	var out []map[string]any
	for _, k := range []string{"initContainers", "containers"} {
		for _, c := range list(spec, k) {
			out = append(out, c.(map[string]any))
		}
	}
	return out
}

// matches reports whether matchLabels-style sel selects labels (an empty
// selector selects everything).
func matches(sel, labels map[string]any) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// references returns every dangling reference in r, one line each.
func references(r rendered) []string {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	type key struct{ kind, ns, name string }
	have := map[key]object{}
	for _, o := range r.objs {
		have[key{o.kind(), o.namespace(), o.name()}] = o
	}
	external := func(kind, name string) bool {
		return strings.HasPrefix(r.dir, "base") && kind == "Secret" && name == "sandboxapi"
	}
	need := func(w workload, kind, name, dataKey string) {
		o, ok := have[key{kind, w.obj.namespace(), name}]
		if !ok {
			if !external(kind, name) {
				bad("%s %s refers to %s %s, which is not in namespace %q of this render", w.obj.kind(), w.obj.name(), kind, name, w.obj.namespace())
			}
			return
		}
		if dataKey == "" {
			return
		}
		for _, field := range []string{"data", "stringData"} {
			if get(o, field, dataKey) != nil {
				return
			}
		}
		bad("%s %s refers to key %q of %s %s, which it does not have", w.obj.kind(), w.obj.name(), dataKey, kind, name)
	}
	ws := workloads(r.objs)
	for _, w := range ws {
		if sel, _ := get(w.obj, "spec", "selector", "matchLabels").(map[string]any); (len(sel) == 0 || !matches(sel, w.labels)) && w.obj.kind() != "CronJob" && w.obj.kind() != "Job" {
			bad("%s %s: its selector does not select its own pod template", w.obj.kind(), w.obj.name())
		}
		if w.spec == nil {
			bad("%s %s: no pod template", w.obj.kind(), w.obj.name())
			continue
		}
		if sa, _ := w.spec["serviceAccountName"].(string); sa != "" {
			need(w, "ServiceAccount", sa, "")
		}
		volumes := map[string]bool{}
		for _, v := range list(w.spec, "volumes") {
			name, _ := get(v, "name").(string)
			volumes[name] = false
			if cm, ok := get(v, "configMap", "name").(string); ok {
				need(w, "ConfigMap", cm, "")
				for _, it := range list(v, "configMap", "items") {
					need(w, "ConfigMap", cm, get(it, "key").(string))
				}
			}
			if s, ok := get(v, "secret", "secretName").(string); ok {
				need(w, "Secret", s, "")
			}
			if c, ok := get(v, "persistentVolumeClaim", "claimName").(string); ok {
				need(w, "PersistentVolumeClaim", c, "")
			}
		}
		for _, c := range containers(w.spec) {
			for _, m := range list(c, "volumeMounts") {
				name, _ := get(m, "name").(string)
				if _, ok := volumes[name]; !ok {
					bad("%s %s: container %v mounts volume %q, which the pod does not have", w.obj.kind(), w.obj.name(), c["name"], name)
				}
				volumes[name] = true
			}
			for _, e := range list(c, "env") {
				if n, ok := get(e, "valueFrom", "secretKeyRef", "name").(string); ok {
					need(w, "Secret", n, get(e, "valueFrom", "secretKeyRef", "key").(string))
				}
				if n, ok := get(e, "valueFrom", "configMapKeyRef", "name").(string); ok {
					need(w, "ConfigMap", n, get(e, "valueFrom", "configMapKeyRef", "key").(string))
				}
			}
			ports := map[string]bool{}
			for _, p := range list(c, "ports") {
				if n, ok := get(p, "name").(string); ok {
					ports[n] = true
				}
			}
			for _, probe := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
				if p, ok := get(c, probe, "httpGet", "port").(string); ok && !ports[p] {
					bad("%s %s: container %v's %s uses port %q, which it does not name", w.obj.kind(), w.obj.name(), c["name"], probe, p)
				}
			}
		}
		for name, used := range volumes {
			if !used {
				bad("%s %s: volume %q is mounted by no container", w.obj.kind(), w.obj.name(), name)
			}
		}
	}
	// selected returns the pod templates sel selects in ns, and the
	// container ports (by name and number) they have.
	selected := func(ns string, sel map[string]any) (n int, ports map[any]bool) {
		ports = map[any]bool{}
		for _, w := range ws {
			if w.obj.namespace() != ns || !matches(sel, w.labels) {
				continue
			}
			n++
			for _, c := range containers(w.spec) {
				for _, p := range list(c, "ports") {
					ports[get(p, "name")] = true
					ports[get(p, "containerPort")] = true
				}
			}
		}
		return n, ports
	}
	for _, o := range r.objs {
		var sel map[string]any
		var targets []any
		switch o.kind() {
		case "Service":
			sel, _ = get(o, "spec", "selector").(map[string]any)
			for _, p := range list(o, "spec", "ports") {
				targets = append(targets, get(p, "targetPort"))
			}
		case "PodDisruptionBudget":
			sel, _ = get(o, "spec", "selector", "matchLabels").(map[string]any)
		case "NetworkPolicy":
			sel, _ = get(o, "spec", "podSelector", "matchLabels").(map[string]any)
			for _, rule := range list(o, "spec", "ingress") {
				for _, p := range list(rule, "ports") {
					targets = append(targets, get(p, "port"))
				}
				for _, from := range list(rule, "from") {
					if fs, ok := get(from, "podSelector", "matchLabels").(map[string]any); ok {
						if n, _ := selected(o.namespace(), fs); n == 0 {
							bad("%s %s: an ingress rule admits pods that no workload here has", o.kind(), o.name())
						}
					}
				}
			}
		default:
			continue
		}
		n, ports := selected(o.namespace(), sel)
		if n == 0 {
			bad("%s %s selects no pod", o.kind(), o.name())
			continue
		}
		for _, p := range targets {
			if p != nil && !ports[p] {
				bad("%s %s: port %v is not a container port of the pods it selects", o.kind(), o.name(), p)
			}
		}
	}
	return problems
}
