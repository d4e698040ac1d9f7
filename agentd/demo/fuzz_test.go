package demo

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/forever-agents/forever/agentd/host"
)

// FuzzStepsStart: the steps agent's start payload is accepted within its
// bounds or refused with host.ErrBadRequest.
func FuzzStepsStart(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"steps":3,"delayMs":0}`, `{"steps":100001}`, `{"steps":5,"recoveryDelayMs":-1}`, `{"steps":1e10}`, `{"steps":"3"}`, `null`, `{"steps":2,"effect":"none"}`, `{"effect":"boom"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseStepsStart(data)
		if err != nil {
			if !errors.Is(err, host.ErrBadRequest) {
				t.Fatalf("parseStepsStart(%q): %v does not wrap host.ErrBadRequest", data, err)
			}
			return
		}
		if req.Steps < 1 || req.Steps > 100000 || req.DelayMS < 0 || req.RecoveryDelayMS < 0 ||
			(req.Effect != "" && req.Effect != StepEffectEvent && req.Effect != StepEffectNone) {
			t.Fatalf("parseStepsStart(%q) accepted %+v", data, req)
		}
		enc, _ := json.Marshal(req)
		if back, err := parseStepsStart(enc); err != nil || back != req {
			t.Fatalf("round trip of %s: %+v, %v", enc, back, err)
		}
	})
}
