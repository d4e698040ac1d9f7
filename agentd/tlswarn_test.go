package agentd

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestPlaintextWarning: --auth on a non-loopback address without TLS is
// warned about, naming the listeners; with TLS, on loopback, or without
// auth (refused or --insecure, warned elsewhere) it is not.
func TestPlaintextWarning(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // substring of the warning; empty: no warning
	}{
		{"public http", Config{Auth: true, HTTPAddr: "0.0.0.0:8080"}, "--http listen"},
		{"public nats and routes", Config{Auth: true, NATSListen: "0.0.0.0:4222", ClusterListen: "10.0.0.1:6222",
			Routes: []string{"10.0.0.2:6222"}, AuthSecretFile: "/s"}, "--nats-listen, --cluster-listen"},
		{"with tls", Config{Auth: true, HTTPAddr: "0.0.0.0:8080", TLSCert: "c.pem", TLSKey: "k.pem"}, ""},
		{"loopback", Config{Auth: true}, ""},
		{"no auth", Config{Insecure: true, HTTPAddr: "0.0.0.0:8080"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tc.cfg.DataDir = t.TempDir()
			tc.cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
			d, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			d.warnPlaintext()
			got := buf.String()
			if tc.want == "" {
				if got != "" {
					t.Fatalf("unexpected warning: %s", got)
				}
				return
			}
			if !strings.Contains(got, "level=WARN") || !strings.Contains(got, tc.want) || !strings.Contains(got, "--tls-cert") {
				t.Fatalf("warning %q, want one naming %q and --tls-cert", got, tc.want)
			}
		})
	}
}

// TestMetricsAddr: under --auth metrics leave the HTTP port for loopback
// by default; --metrics-listen moves them anywhere; a tenant's daemon
// serves none.
func TestMetricsAddr(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{Auth: true}, DefaultAuthMetricsListen},
		{Config{Auth: true, MetricsListen: "0.0.0.0:9100"}, "0.0.0.0:9100"},
		{Config{MetricsListen: "127.0.0.1:0"}, "127.0.0.1:0"},
		{Config{Auth: true, Tenant: &TenantLink{Name: "t"}}, ""},
	} {
		if got := tc.cfg.metricsAddr(); got != tc.want {
			t.Errorf("%+v: metrics on %q, want %q", tc.cfg, got, tc.want)
		}
	}
}
