package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWindowProfile: -window-cpuprofile writes one CPU profile per timed
// window of tool-agents, and refuses to run beside -cpuprofile.
func TestWindowProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "w.prof")
	var out, progress bytes.Buffer
	args := []string{"-sync", "interval", "-n", "0.01", "-dir", dir, "-run", "^tool-agents$", "-window-cpuprofile", prof}
	if err := run(t.Context(), args, &out, &progress); err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	st, err := os.Stat(prof + ".1")
	if err != nil || st.Size() == 0 {
		t.Fatalf("no profile of the first window: %v", err)
	}
	err = run(t.Context(), append(args, "-cpuprofile", filepath.Join(dir, "c.prof")), &out, &progress)
	if err == nil || !strings.Contains(err.Error(), "one CPU profile at a time") {
		t.Fatalf("-cpuprofile with -window-cpuprofile: %v, want a refusal", err)
	}
}
