package chartargs_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/forever-agents/forever/internal/chartargs"
)

// chartDir is helm/forever from this package's directory.
var chartDir = filepath.Join("..", "..", "helm", "forever")

// The chart's fixed container settings (values.yaml defaults).
const (
	dataDir     = "/data"
	httpPort    = 8080
	natsPort    = 4222
	clusterPort = 6222
	metricsPort = 9464
	// gracePeriod is the default terminationGracePeriodSeconds:
	// leaseTtl 10s + 4 * shutdownTimeout 10s + 10s margin.
	gracePeriod = 60
)

// chartCase is one rendering of the chart and the pods it must describe.
type chartCase struct {
	name      string
	release   string
	namespace string
	set       []string
	fullname  string
	pods      int
	clustered bool   // embedded NATS cluster flags and ports
	external  string // external NATS URL, or ""
	replicas  int
	noAuth    bool // auth.enabled=false
	shards    int  // agentd.shards; 0 for the default, chartargs.DefaultShards
}

// The cases with auth set auth.generateSecret: helm template has no
// cluster to look the auth Secret up in, and the chart refuses to render a
// random one otherwise (internal/chartcheck's TestAuthSecret).
var chartCases = []chartCase{
	{name: "default", release: "forever", namespace: "agents", set: []string{"auth.generateSecret=true"},
		fullname: "forever", pods: 3, clustered: true, replicas: 3},
	{name: "one replica", release: "forever", namespace: "default", set: []string{"auth.generateSecret=true", "replicaCount=1"},
		fullname: "forever", pods: 1, replicas: 1},
	{name: "five replicas", release: "demo", namespace: "ai", set: []string{"auth.generateSecret=true", "replicaCount=5"},
		fullname: "demo-forever", pods: 5, clustered: true, replicas: 3},
	{name: "shards", release: "forever", namespace: "agents", set: []string{"auth.generateSecret=true", "agentd.shards=4"},
		fullname: "forever", pods: 3, clustered: true, replicas: 3, shards: 4},
	{name: "default shards set", release: "forever", namespace: "agents", set: []string{"auth.generateSecret=true", "agentd.shards=8"},
		fullname: "forever", pods: 3, clustered: true, replicas: 3, shards: 8},
	{name: "unsharded", release: "forever", namespace: "agents", set: []string{"auth.generateSecret=true", "agentd.shards=1"},
		fullname: "forever", pods: 3, clustered: true, replicas: 3, shards: 1},
	{name: "auth off", release: "forever", namespace: "agents", set: []string{"auth.enabled=false"},
		fullname: "forever", pods: 3, clustered: true, replicas: 3, noAuth: true},
	{name: "external NATS", release: "forever", namespace: "agents",
		set:      []string{"externalNats.enabled=true", "externalNats.url=nats://nats.nats.svc:4222"},
		fullname: "forever", pods: 3, external: "nats://nats.nats.svc:4222", replicas: 3},
}

// TestChart renders the chart with helm template and checks that every pod
// starts agentd exactly as chartargs.Args and Env say, with routes to every
// pod, the replicas the chart promises, and the cluster's safety objects.
func TestChart(t *testing.T) {
	helm := helmBinary(t)
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, helm, tc)
			sts := m.statefulSet(t, tc.fullname)
			checkPods(t, tc, sts)
			checkServices(t, tc, m, sts)
			checkDisruption(t, tc, m, sts)
			checkAuthSecret(t, tc, m, sts)
		})
	}
}

// TestChartLint runs helm lint on the values TestChart renders.
func TestChartLint(t *testing.T) {
	helm := helmBinary(t)
	for _, tc := range chartCases {
		args := []string{"lint", chartDir, "--strict"}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		if out, err := exec.Command(helm, args...).CombinedOutput(); err != nil {
			t.Errorf("%s: helm %s: %v\n%s", tc.name, strings.Join(args, " "), err, out)
		}
	}
}

// TestChartValues: the interface outside tests rely on.
func TestChartValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^replicaCount: 3$`).Match(b) {
		t.Error("values.yaml has no line `replicaCount: 3`")
	}
	// agentd's defaults for a new cluster, which the chart leaves to it.
	for _, line := range []string{
		fmt.Sprintf("  partitions: %d", chartargs.DefaultPartitions),
		fmt.Sprintf("  shards: %d", chartargs.DefaultShards),
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).Match(b) {
			t.Errorf("values.yaml has no line %q", line)
		}
	}
}

func checkPods(t *testing.T, tc chartCase, sts statefulSet) {
	t.Helper()
	if sts.Spec.Replicas != tc.pods {
		t.Errorf("replicas = %d, want %d", sts.Spec.Replicas, tc.pods)
	}
	if sts.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("podManagementPolicy = %q, want Parallel (JetStream needs its quorum to start)", sts.Spec.PodManagementPolicy)
	}
	pod := sts.Spec.Template.Spec
	if pod.TerminationGracePeriodSeconds != gracePeriod {
		t.Errorf("terminationGracePeriodSeconds = %d, want %d", pod.TerminationGracePeriodSeconds, gracePeriod)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if ref := c.env("POD_NAME"); ref.ValueFrom == nil || ref.ValueFrom.FieldRef == nil || ref.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env POD_NAME = %+v, want the downward API's metadata.name", ref)
	}
	var routes []string
	for i := range tc.pods {
		routes = append(routes, fmt.Sprintf("nats://%s-%d.%s-headless.%s.svc.cluster.local:%d",
			tc.fullname, i, tc.fullname, tc.namespace, clusterPort))
	}
	for i := range tc.pods {
		name := fmt.Sprintf("%s-%d", sts.Metadata.Name, i)
		want := chartargs.Pod{
			Name:          name,
			Data:          dataDir,
			HTTP:          fmt.Sprintf("0.0.0.0:%d", httpPort),
			MetricsListen: fmt.Sprintf("0.0.0.0:%d", metricsPort),
			NATSURL:       tc.external,
			Replicas:      tc.replicas,
			Partitions:    chartargs.DefaultPartitions,
			Shards:        cmp.Or(tc.shards, chartargs.DefaultShards),
			LeaseTTL:      chartargs.DefaultLeaseTTL,
		}
		if tc.external == "" {
			want.NATSListen = fmt.Sprintf("0.0.0.0:%d", natsPort)
			want.Replicas = chartargs.Replicas(tc.pods)
			if !tc.noAuth {
				want.AuthSecretFile = chartargs.AuthSecretPath
			}
		}
		if tc.clustered {
			want.Cluster = tc.fullname
			want.ClusterListen = fmt.Sprintf("0.0.0.0:%d", clusterPort)
			want.Routes = routes
		}
		if want.Replicas != tc.replicas {
			t.Errorf("chartargs.Replicas(%d) = %d, want %d", tc.pods, want.Replicas, tc.replicas)
		}
		got := c.expandArgs(t, map[string]string{"POD_NAME": name})
		if w := chartargs.Args(want); !slices.Equal(got, w) {
			t.Errorf("pod %s args:\n got %q\nwant %q", name, got, w)
		}
		if got, w := c.plainEnv(), chartargs.Env(want); !slices.Equal(got, w) {
			t.Errorf("pod %s env:\n got %q\nwant %q", name, got, w)
		}
	}
	flags := chartargs.Flags()
	for _, a := range c.Args {
		name, _, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok || !slices.Contains(flags, name) {
			t.Errorf("arg %q is not --flag=value with a flag in chartargs.Flags", a)
		}
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	wantPorts := map[string]int{"http": httpPort, "metrics": metricsPort}
	if tc.external == "" {
		wantPorts["nats"] = natsPort
	}
	if tc.clustered {
		wantPorts["cluster"] = clusterPort
	}
	if !maps.Equal(ports, wantPorts) {
		t.Errorf("container ports = %v, want %v", ports, wantPorts)
	}
}

// checkServices: the pods' DNS names in the routes are the headless
// service's, which publishes pods before they are ready and carries the
// route port.
func checkServices(t *testing.T, tc chartCase, m manifests, sts statefulSet) {
	t.Helper()
	headless := m.service(t, tc.fullname+"-headless")
	if sts.Spec.ServiceName != headless.Metadata.Name {
		t.Errorf("serviceName = %q, want %q", sts.Spec.ServiceName, headless.Metadata.Name)
	}
	if headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("headless service: clusterIP %q, publishNotReadyAddresses %v; want None, true",
			headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	if got := headless.port("cluster"); tc.clustered && got != clusterPort || !tc.clustered && got != 0 {
		t.Errorf("headless service cluster port = %d (clustered %v)", got, tc.clustered)
	}
	if got := m.service(t, tc.fullname).port("cluster"); got != 0 {
		t.Errorf("client service exposes the route port %d", got)
	}
}

// checkDisruption: with more than one pod, a PDB lets one pod go at a time
// and pods prefer distinct hosts.
func checkDisruption(t *testing.T, tc chartCase, m manifests, sts statefulSet) {
	t.Helper()
	pdbs := m.byKind("PodDisruptionBudget")
	aff := sts.Spec.Template.Spec.Affinity
	if tc.pods == 1 {
		if len(pdbs) != 0 {
			t.Errorf("%d PodDisruptionBudgets for one pod, want none (it would block every drain)", len(pdbs))
		}
		return
	}
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(pdbs))
	}
	var pdb podDisruptionBudget
	decode(t, pdbs[0], &pdb)
	if pdb.Spec.MaxUnavailable != 1 || !maps.Equal(pdb.Spec.Selector.MatchLabels, sts.Spec.Selector.MatchLabels) {
		t.Errorf("PDB spec = %+v, want maxUnavailable 1 and the StatefulSet's selector %v", pdb.Spec, sts.Spec.Selector.MatchLabels)
	}
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.Preferred) != 1 {
		t.Fatalf("affinity = %+v, want one preferred pod anti-affinity term", aff)
	}
	term := aff.PodAntiAffinity.Preferred[0].PodAffinityTerm
	if term.TopologyKey != "kubernetes.io/hostname" || !maps.Equal(term.LabelSelector.MatchLabels, sts.Spec.Selector.MatchLabels) {
		t.Errorf("anti-affinity term = %+v, want hostname and the StatefulSet's selector", term)
	}
}

// helmBinary returns helm's path, or skips the test when it is missing,
// except in CI, where .ci/run installs it.
func helmBinary(t *testing.T) string {
	t.Helper()
	helm, err := exec.LookPath("helm")
	if err != nil {
		msg := "helm not on PATH: go install helm.sh/helm/v3/cmd/helm@<version in .ci/run> and add $(go env GOPATH)/bin to PATH"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return helm
}

// manifests are the documents helm template rendered.
type manifests []*yaml.Node

func render(t *testing.T, helm string, tc chartCase) manifests {
	t.Helper()
	args := []string{"template", tc.release, chartDir, "--namespace", tc.namespace}
	for _, s := range tc.set {
		args = append(args, "--set", s)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var m manifests
	dec := yaml.NewDecoder(&stdout)
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return m
		}
		if err != nil {
			t.Fatalf("parse helm template output: %v", err)
		}
		if len(doc.Content) > 0 && doc.Content[0].Kind == yaml.MappingNode {
			m = append(m, &doc)
		}
	}
}

func decode(t *testing.T, n *yaml.Node, v any) {
	t.Helper()
	if err := n.Decode(v); err != nil {
		t.Fatalf("decode manifest: %v", err)
	}
}

type object struct {
	Kind     string
	Metadata struct{ Name string }
}

func (m manifests) byKind(kind string) []*yaml.Node {
	var out []*yaml.Node
	for _, n := range m {
		var o object
		if n.Decode(&o) == nil && o.Kind == kind {
			out = append(out, n)
		}
	}
	return out
}

func (m manifests) named(t *testing.T, kind, name string, v any) {
	t.Helper()
	for _, n := range m.byKind(kind) {
		var o object
		decode(t, n, &o)
		if o.Metadata.Name == name {
			decode(t, n, v)
			return
		}
	}
	t.Fatalf("no %s %q rendered", kind, name)
}

func (m manifests) statefulSet(t *testing.T, name string) statefulSet {
	t.Helper()
	var s statefulSet
	m.named(t, "StatefulSet", name, &s)
	return s
}

func (m manifests) service(t *testing.T, name string) service {
	t.Helper()
	var s service
	m.named(t, "Service", name, &s)
	return s
}

type selector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type statefulSet struct {
	Metadata struct{ Name string }
	Spec     struct {
		Replicas            int
		ServiceName         string `yaml:"serviceName"`
		PodManagementPolicy string `yaml:"podManagementPolicy"`
		Selector            selector
		Template            struct {
			Spec struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				Containers                    []container
				Volumes                       []struct {
					Name   string
					Secret *struct {
						SecretName string `yaml:"secretName"`
					}
				}
				Affinity *struct {
					PodAntiAffinity *struct {
						Preferred []struct {
							Weight          int
							PodAffinityTerm struct {
								TopologyKey   string   `yaml:"topologyKey"`
								LabelSelector selector `yaml:"labelSelector"`
							} `yaml:"podAffinityTerm"`
						} `yaml:"preferredDuringSchedulingIgnoredDuringExecution"`
					} `yaml:"podAntiAffinity"`
				}
			}
		}
	}
}

type envVar struct {
	Name      string
	Value     string
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type container struct {
	Name         string
	Args         []string
	Env          []envVar
	VolumeMounts []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
}

func (c container) env(name string) envVar {
	for _, e := range c.Env {
		if e.Name == name {
			return e
		}
	}
	return envVar{}
}

// plainEnv is the container's env with literal values, as "NAME=value".
func (c container) plainEnv() []string {
	var out []string
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			out = append(out, e.Name+"="+e.Value)
		}
	}
	return out
}

// varRef is a Kubernetes dependent variable reference in args.
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandArgs expands $(VAR) in the args as the kubelet does, from vars; a
// reference to a variable the container does not define fails the test (the
// kubelet would pass it on literally).
func (c container) expandArgs(t *testing.T, vars map[string]string) []string {
	t.Helper()
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v, ok := vars[name]
			if !ok || c.env(name).Name == "" {
				t.Errorf("arg %q refers to %s, which the container does not define", a, name)
			}
			return v
		})
	}
	return out
}

type service struct {
	Metadata struct{ Name string }
	Spec     struct {
		ClusterIP                string `yaml:"clusterIP"`
		PublishNotReadyAddresses bool   `yaml:"publishNotReadyAddresses"`
		Ports                    []struct {
			Name string
			Port int
		}
	}
}

func (s service) port(name string) int {
	for _, p := range s.Spec.Ports {
		if p.Name == name {
			return p.Port
		}
	}
	return 0
}

type podDisruptionBudget struct {
	Spec struct {
		MaxUnavailable int `yaml:"maxUnavailable"`
		Selector       selector
	}
}

// checkAuthSecret: with auth (the default), the chart creates the Secret
// once and mounts it where FOREVER_AUTH_SECRET_FILE points.
func checkAuthSecret(t *testing.T, tc chartCase, m manifests, sts statefulSet) {
	t.Helper()
	auth := tc.external == "" && !tc.noAuth
	name := tc.fullname + "-auth"
	var secret struct {
		Metadata struct {
			Name        string
			Annotations map[string]string
		}
		Data map[string]string
	}
	if n := len(m.byKind("Secret")); n != map[bool]int{true: 1, false: 0}[auth] {
		t.Fatalf("%d Secrets, auth %v", n, auth)
	}
	if !auth {
		return
	}
	m.named(t, "Secret", name, &secret)
	if len(secret.Data["secret"]) < 48 || secret.Metadata.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("auth Secret %+v", secret)
	}
	var mounted bool
	for _, v := range sts.Spec.Template.Spec.Volumes {
		mounted = mounted || (v.Name == "auth" && v.Secret != nil && v.Secret.SecretName == name)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	for _, vm := range c.VolumeMounts {
		if vm.Name == "auth" && vm.MountPath+"/secret" != chartargs.AuthSecretPath {
			t.Errorf("auth mounted at %s", vm.MountPath)
		}
	}
	if !mounted {
		t.Error("the auth Secret is not a volume of the pods")
	}
}
