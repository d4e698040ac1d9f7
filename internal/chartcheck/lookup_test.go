package chartcheck_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuthSecretLookup renders the chart as helm install and upgrade do,
// against a fake Kubernetes API server (helm template --dry-run=server):
// the Secret there is kept as it is; without one, where the release's
// namespace (or "default", before --create-namespace made it) is found,
// lookup works and a random secret is generated once.
func TestAuthSecretLookup(t *testing.T) {
	helm := helmBinary(t)
	kept := base64.StdEncoding.EncodeToString([]byte("the-secret-every-credential-was-signed-with"))
	cases := []struct {
		name      string
		objects   map[string]any // by API path
		want      string         // the Secret's data.secret; "" any random one
		wantError string
	}{
		{name: "upgrade keeps the Secret", objects: map[string]any{
			"/api/v1/namespaces/agents": namespaceObject("agents"),
			"/api/v1/namespaces/agents/secrets/forever-auth": map[string]any{
				"apiVersion": "v1", "kind": "Secret",
				"metadata": map[string]any{"name": "forever-auth", "namespace": "agents",
					"labels":      map[string]string{"app.kubernetes.io/managed-by": "Helm"},
					"annotations": map[string]string{"meta.helm.sh/release-name": "forever", "meta.helm.sh/release-namespace": "agents"}},
				"data": map[string]string{"secret": kept},
			},
		}, want: kept},
		{name: "install into a namespace", objects: map[string]any{
			"/api/v1/namespaces/agents": namespaceObject("agents"),
		}},
		{name: "install with --create-namespace", objects: map[string]any{
			"/api/v1/namespaces/default": namespaceObject("default"),
		}},
		{name: "no namespace found", objects: map[string]any{}, wantError: "auth.generateSecret=true"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := fakeCluster(t, tc.objects)
			args := append(templateArgs(), "--dry-run=server", "--disable-openapi-validation")
			cmd := exec.Command(helm, args...)
			cmd.Env = env
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if tc.wantError != "" {
				if err == nil || !strings.Contains(stderr.String(), tc.wantError) {
					t.Fatalf("helm %s: %v, want an error with %q\n%s", strings.Join(args, " "), err, tc.wantError, stderr.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
			}
			m, err := parseManifests(string(out))
			if err != nil {
				t.Fatal(err)
			}
			var s secretManifest
			m.one(t, "Secret", &s)
			got := s.Data["secret"]
			if tc.want != "" && got != tc.want {
				t.Errorf("Secret data %q, want the one in the cluster %q", got, tc.want)
			}
			if b, err := base64.StdEncoding.DecodeString(got); err != nil || len(b) < 32 {
				t.Errorf("Secret data %q (%v), want at least 32 bytes", got, err)
			}
		})
	}
}

func namespaceObject(name string) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}
}

// fakeCluster serves the part of the Kubernetes API helm install's dry run
// reads: version, discovery of the chart's kinds, objects (404 unless in
// objects), an empty list of release Secrets. It returns an environment
// whose kubeconfig points at it.
func fakeCluster(t *testing.T, objects map[string]any) []string {
	t.Helper()
	resources := func(gv string, kinds ...string) map[string]any {
		var rs []map[string]any
		for _, k := range kinds {
			name, kind, _ := strings.Cut(k, ":")
			rs = append(rs, map[string]any{"name": name, "singularName": strings.ToLower(kind), "kind": kind,
				"namespaced": kind != "Namespace", "verbs": []string{"get", "list", "create", "update", "patch", "delete"}})
		}
		return map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": rs}
	}
	group := func(name string) map[string]any {
		v := map[string]string{"groupVersion": name + "/v1", "version": "v1"}
		return map[string]any{"name": name, "versions": []any{v}, "preferredVersion": v}
	}
	fixed := map[string]any{
		"/version": map[string]string{"major": "1", "minor": "33", "gitVersion": "v1.33.0"},
		"/api":     map[string]any{"kind": "APIVersions", "versions": []string{"v1"}},
		"/apis": map[string]any{"kind": "APIGroupList", "apiVersion": "v1",
			"groups": []any{group("apps"), group("policy"), group("networking.k8s.io")}},
		"/api/v1": resources("v1", "namespaces:Namespace", "secrets:Secret", "services:Service",
			"serviceaccounts:ServiceAccount", "configmaps:ConfigMap"),
		"/apis/apps/v1":              resources("apps/v1", "statefulsets:StatefulSet"),
		"/apis/policy/v1":            resources("policy/v1", "poddisruptionbudgets:PodDisruptionBudget"),
		"/apis/networking.k8s.io/v1": resources("networking.k8s.io/v1", "networkpolicies:NetworkPolicy"),
		// Helm's release records: none.
		"/api/v1/namespaces/agents/secrets": map[string]any{"kind": "SecretList", "apiVersion": "v1", "metadata": map[string]any{}, "items": []any{}},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		obj, ok := fixed[r.URL.Path]
		if !ok {
			obj, ok = objects[r.URL.Path]
		}
		if !ok || r.Method != http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"%s not found"}`, r.URL.Path)
			return
		}
		json.NewEncoder(w).Encode(obj)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: agents}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+dir, "KUBECACHEDIR="+filepath.Join(dir, "cache"))
}
