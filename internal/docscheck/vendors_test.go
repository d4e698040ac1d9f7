package docscheck

import (
	"os/exec"
	"strings"
	"testing"
)

// vendorSDKs are the import path prefixes of the model vendors' SDKs.
var vendorSDKs = []string{
	"github.com/openai/openai-go",
	"github.com/anthropics/anthropic-sdk-go",
}

// The library packages compile no model vendor's SDK: only the binary,
// which builds the provider its flags name, does (STYLE.md, "Vendors at
// the edge"; docs/architecture.md's package table).
func TestVendorsAtTheEdge(t *testing.T) {
	pkgs := []string{"./agentd", "./agentd/host", "./chat", "./agents", "./verify"}
	const binary = "./agentd/cmd/agentd"
	// One go list for the libraries and the binary: each line is a
	// package and every package it compiles.
	cmd := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}"}, append(pkgs, binary)...)...)
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(pkgs)+1 {
		t.Fatalf("go list printed %d lines for %d packages:\n%s", len(lines), len(pkgs)+1, out)
	}
	var binDeps string
	for _, line := range lines {
		pkg, deps, _ := strings.Cut(line, " ")
		if strings.HasSuffix(pkg, strings.TrimPrefix(binary, ".")) {
			binDeps = deps
			continue
		}
		for _, dep := range strings.Fields(deps) {
			for _, sdk := range vendorSDKs {
				if strings.HasPrefix(dep, sdk) {
					t.Errorf("%s is compiled by %s: a vendor SDK belongs in its own provider package, imported only by the binary", dep, pkg)
				}
			}
		}
	}
	// The check can fail: the binary does compile them.
	if !strings.Contains(binDeps, vendorSDKs[0]) {
		t.Errorf("the binary compiles no %s: the check above would not see a leak", vendorSDKs[0])
	}
}
