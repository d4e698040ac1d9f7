package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// profiled runs f, under a CPU profile of its own when the Env's
// WindowProfile is set: the file WindowProfile.N for the Nth window of the
// run, so that a profile holds only what a scenario times (its warm-up,
// baselines and checks left out). go tool pprof merges the files.
func (e *Env) profiled(f func() error) error {
	if e.cfg.WindowProfile == "" {
		return f()
	}
	e.windows++
	out, err := os.Create(fmt.Sprintf("%s.%d", e.cfg.WindowProfile, e.windows))
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		return errors.Join(err, out.Close())
	}
	err = f()
	pprof.StopCPUProfile()
	return errors.Join(err, out.Close())
}
