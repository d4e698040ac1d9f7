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
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...)
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, sdk := range vendorSDKs {
			if strings.HasPrefix(dep, sdk) {
				t.Errorf("%s is compiled by one of %v: a vendor SDK belongs in its own provider package, imported only by the binary", dep, pkgs)
			}
		}
	}
	// The check can fail: the binary does compile them.
	cmd = exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./agentd/cmd/agentd")
	cmd.Dir = root(t)
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./agentd/cmd/agentd: %v", err)
	}
	if !strings.Contains(string(out), vendorSDKs[0]) {
		t.Errorf("the binary compiles no %s: the check above would not see a leak", vendorSDKs[0])
	}
}
