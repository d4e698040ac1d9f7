package agentd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// DataDirPerm is the mode of the data dir and of the directories agentd
// makes in it: the conversations, keys and credentials stored there are
// readable by agentd's user only.
const DataDirPerm = 0o700

// prepareDataDir creates dir when missing and checks that it is a writable
// directory. The data dir is made (or, when it exists, narrowed to)
// DataDirPerm, and so are its jetstream and pebble subdirectories when they
// exist (nats-server and Pebble make them, under the binary's umask); a
// directory agentd may not chmod (a volume's root owned by another user)
// keeps its mode. Errors wrap ErrDataDir and name --data.
func prepareDataDir(dir string) error {
	fail := func(cause error, format string, args ...any) error {
		return newFlagError(ErrDataDir, cause, "data", fmt.Sprintf(format, args...))
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, DataDirPerm); err != nil {
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
	narrow(dir)
	for _, sub := range []string{JetStreamSubdir, PebbleSubdir} {
		p := filepath.Join(dir, sub)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return fail(nil, "data dir %s holds a file %s where a directory belongs", dir, sub)
		}
		narrow(p)
	}
	return nil
}

// narrow takes the group's and others' permissions off dir, when agentd
// may: a directory owned by another user keeps its mode.
func narrow(dir string) {
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o077 != 0 {
		_ = os.Chmod(dir, fi.Mode().Perm()&^0o077)
	}
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
