package chartcheck_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// chartDir is helm/forever from this package's directory.
var chartDir = filepath.Join("..", "..", "helm", "forever")

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

// helmRun runs helm with args and returns its stdout, stderr and error.
func helmRun(helm string, args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// setArgs turns "k=v" settings into helm --set flags.
func setArgs(set []string) []string {
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

// templateArgs are helm template's arguments for the chart, release forever
// in namespace agents, with set.
func templateArgs(set ...string) []string {
	return append([]string{"template", "forever", chartDir, "--namespace", "agents"}, setArgs(set)...)
}

// manifests are the documents helm template rendered.
type manifests []*yaml.Node

// render runs helm template with set and parses what it renders; a
// failure fails the test.
func render(t *testing.T, helm string, set ...string) manifests {
	t.Helper()
	args := templateArgs(set...)
	stdout, stderr, err := helmRun(helm, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	m, err := parseManifests(stdout)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func parseManifests(s string) (manifests, error) {
	var m manifests
	dec := yaml.NewDecoder(strings.NewReader(s))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		if len(doc.Content) > 0 && doc.Content[0].Kind == yaml.MappingNode {
			m = append(m, &doc)
		}
	}
}

type object struct {
	Kind     string
	Metadata struct {
		Name        string
		Namespace   string
		Labels      map[string]string
		Annotations map[string]string
	}
}

// byKind returns the documents of kind.
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

// one decodes the only document of kind into v, failing the test unless
// there is exactly one.
func (m manifests) one(t *testing.T, kind string, v any) {
	t.Helper()
	docs := m.byKind(kind)
	if len(docs) != 1 {
		t.Fatalf("%d %s rendered, want 1", len(docs), kind)
	}
	if err := docs[0].Decode(v); err != nil {
		t.Fatalf("decode %s: %v", kind, err)
	}
}
