package agentd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// prepareDataDir creates dir when missing and checks that it is a writable
// directory. Errors wrap ErrDataDir and name --data.
func prepareDataDir(dir string) error {
	fail := func(cause error, format string, args ...any) error {
		return newFlagError(ErrDataDir, cause, "data", fmt.Sprintf(format, args...))
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail(err, "data dir %s cannot be created: %v", dir, unwrapPathError(err))
		}
	case err != nil:
		return fail(err, "data dir %s: %v", dir, unwrapPathError(err))
	case !fi.IsDir():
		return fail(nil, "data dir %s is a file, not a directory", dir)
	}
	probe, err := os.CreateTemp(dir, ".agentd-write-check-*")
	if err != nil {
		return fail(err, "data dir %s is not writable: %v", dir, unwrapPathError(err))
	}
	name := probe.Name()
	err = errors.Join(probe.Close(), os.Remove(name))
	if err != nil {
		return fail(err, "data dir %s is not writable: %v", dir, err)
	}
	for _, sub := range []string{JetStreamSubdir, PebbleSubdir} {
		p := filepath.Join(dir, sub)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return fail(nil, "data dir %s holds a file %s where a directory belongs", dir, sub)
		}
	}
	return nil
}

// unwrapPathError drops the path from an *fs.PathError, whose message would
// repeat it.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
