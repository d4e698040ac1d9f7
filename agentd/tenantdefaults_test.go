package agentd

import (
	"strings"
	"testing"

	"github.com/forever-agents/forever/auth"
)

// TestTenantDefaults: a tenant created without quotas is bounded by the
// node's defaults (bytes 1/8 of --js-max-store, given after the default
// was computed); the flags take unlimited and refuse negatives.
func TestTenantDefaults(t *testing.T) {
	cfg, err := ParseFlags([]string{"--js-max-store", "64MiB", "--tenant-default-max-conns", "5", "--tenant-default-max-agents", "unlimited"}, envFrom(nil))
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.TenantQuota(auth.Quota{})
	if q.Bytes != 8<<20 || q.Conns != 5 || q.Agents != 0 || q.Rate != DefaultTenantRate || q.Consumers != DefaultTenantConsumers ||
		q.Subs != DefaultTenantSubs || q.Streams != DefaultTenantStreams || q.Turns != DefaultTenantTurns || q.Memory != (256<<20)/8 {
		t.Fatalf("default quota %+v", q)
	}
	if q := cfg.TenantQuota(auth.Quota{Bytes: auth.Unlimited, Conns: 2}); q.Bytes != 0 || q.Conns != 2 {
		t.Fatalf("own quota %+v", q)
	}
	for _, args := range [][]string{{"--tenant-default-max-bytes", "-1"}, {"--tenant-default-rate", "-3"}, {"--tenant-default-max-consumers", "many"}} {
		if _, err := ParseFlags(args, envFrom(nil)); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "--")) {
			t.Errorf("%v: %v", args, err)
		}
	}
}
