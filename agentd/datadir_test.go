package agentd

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDataDirPerm: the data dir, new or already there with a wider mode,
// and its pebble dir when there, are agentd's user's only; nothing else is
// made (the jetstream dir belongs to the embedded server, if any).
func TestDataDirPerm(t *testing.T) {
	root := t.TempDir()
	fresh := filepath.Join(root, "fresh", "data")
	wide := filepath.Join(root, "wide")
	if err := os.MkdirAll(filepath.Join(wide, PebbleSubdir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wide, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{fresh, wide} {
		if err := prepareDataDir(dir); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{dir, filepath.Join(dir, JetStreamSubdir), filepath.Join(dir, PebbleSubdir)} {
			fi, err := os.Stat(p)
			if os.IsNotExist(err) && p != dir && (dir == fresh || p == filepath.Join(dir, JetStreamSubdir)) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != DataDirPerm {
				t.Errorf("%s: mode %o, want %o", p, got, DataDirPerm)
			}
		}
	}
}
