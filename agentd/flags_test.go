package agentd

import (
	"errors"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/forever-agents/forever/internal/chartargs"
)

func envFrom(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := ParseFlags(nil, envFrom(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"data", cfg.DataDir, "./data"},
		{"nats-url", cfg.NATSURL, ""},
		{"nats-listen", cfg.NATSListen, "127.0.0.1:4222"},
		{"sync", cfg.Sync, SyncAlways},
		{"http", cfg.HTTPAddr, "127.0.0.1:8080"},
		{"js-max-memory", cfg.JetStreamMaxMemory, int64(256 << 20)},
		{"js-max-store", cfg.JetStreamMaxStore, int64(10 << 30)},
		{"chunk-max-age", cfg.ChunkMaxAge, 24 * time.Hour},
		{"idle-timeout", cfg.IdleTimeout, 2 * time.Minute},
		{"log-level", cfg.LogLevel, slog.LevelInfo},
		{"log-format", cfg.LogFormat, LogText},
		{"http-read-header-timeout", cfg.HTTPReadHeaderTimeout, 10 * time.Second},
		{"http-body-timeout", cfg.HTTPBodyTimeout, 30 * time.Second},
		{"http-idle-timeout", cfg.HTTPIdleTimeout, 2 * time.Minute},
		{"http-max-conns", cfg.HTTPMaxConns, 4096},
		{"jetstream dir", cfg.JetStreamDir(), "data/jetstream"},
		{"pebble dir", cfg.PebbleDir(), "data/pebble"},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseFlagsPrecedence(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		get  func(Config) any
		want any
	}{
		{"default", nil, nil, func(c Config) any { return c.HTTPAddr }, "127.0.0.1:8080"},
		{"env beats default", nil, map[string]string{"FOREVER_HTTP": "0.0.0.0:9000", "FOREVER_INSECURE": "true"},
			func(c Config) any { return c.HTTPAddr }, "0.0.0.0:9000"},
		{"flag beats env", []string{"--http", "127.0.0.1:9001"}, map[string]string{"FOREVER_HTTP": "0.0.0.0:9000", "FOREVER_INSECURE": "true"},
			func(c Config) any { return c.HTTPAddr }, "127.0.0.1:9001"},
		{"data env", nil, map[string]string{"FOREVER_DATA": "/var/lib/forever"},
			func(c Config) any { return c.DataDir }, "/var/lib/forever"},
		{"data flag", []string{"-data=/d"}, map[string]string{"FOREVER_DATA": "/var/lib/forever"},
			func(c Config) any { return c.DataDir }, "/d"},
		{"nats url env", nil, map[string]string{"FOREVER_NATS_URL": "nats://n:4222"},
			func(c Config) any { return c.NATSURL }, "nats://n:4222"},
		{"nats listen env", nil, map[string]string{"FOREVER_NATS_LISTEN": "0.0.0.0:4333", "FOREVER_INSECURE": "true"},
			func(c Config) any { return c.NATSListen }, "0.0.0.0:4333"},
		{"sync env", nil, map[string]string{"FOREVER_SYNC": "interval"},
			func(c Config) any { return c.Sync }, SyncInterval},
		{"sync flag beats env", []string{"--sync", "always"}, map[string]string{"FOREVER_SYNC": "interval"},
			func(c Config) any { return c.Sync }, SyncAlways},
		{"log level env", nil, map[string]string{"FOREVER_LOG_LEVEL": "debug"},
			func(c Config) any { return c.LogLevel }, slog.LevelDebug},
		{"log level flag", []string{"--log-level", "warn"}, map[string]string{"FOREVER_LOG_LEVEL": "debug"},
			func(c Config) any { return c.LogLevel }, slog.LevelWarn},
		{"max store env", nil, map[string]string{"FOREVER_JS_MAX_STORE": "2GiB"},
			func(c Config) any { return c.JetStreamMaxStore }, int64(2 << 30)},
		{"max memory flag", []string{"--js-max-memory", "64M"}, map[string]string{"FOREVER_JS_MAX_MEMORY": "1G"},
			func(c Config) any { return c.JetStreamMaxMemory }, int64(64 << 20)},
		{"chunk max age env", nil, map[string]string{"FOREVER_CHUNK_MAX_AGE": "1h"},
			func(c Config) any { return c.ChunkMaxAge }, time.Hour},
		{"idle timeout flag", []string{"--idle-timeout", "30s"}, map[string]string{"FOREVER_IDLE_TIMEOUT": "1h"},
			func(c Config) any { return c.IdleTimeout }, 30 * time.Second},
		{"log format env", nil, map[string]string{"FOREVER_LOG_FORMAT": "json"},
			func(c Config) any { return c.LogFormat }, LogJSON},
		// Owned views are the default of a sharded cluster; --owned-views=false
		// (AllViews) opts out.
		{"owned views by default", []string{"--shards", "8"}, nil,
			func(c Config) any { return c.ownedViews(c.logShards()) }, true},
		{"owned views off", []string{"--shards", "8", "--owned-views=false"}, nil,
			func(c Config) any { return c.ownedViews(c.logShards()) }, false},
		{"owned views off by env", []string{"--shards", "8"}, map[string]string{"FOREVER_OWNED_VIEWS": "false"},
			func(c Config) any { return c.ownedViews(c.logShards()) }, false},
		{"owned views flag beats env", []string{"--shards", "8", "--owned-views"}, map[string]string{"FOREVER_OWNED_VIEWS": "false"},
			func(c Config) any { return c.ownedViews(c.logShards()) }, true},
		{"no owned views unsharded", nil, nil,
			func(c Config) any { return c.ownedViews(c.logShards()) }, false},
		{"no owned views with a per-user budget", []string{"--shards", "8", "--user-token-budget", "1000/24h"}, nil,
			func(c Config) any { return c.ownedViews(c.logShards()) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseFlags(tt.args, envFrom(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.get(cfg); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseFlagsErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // substring of the message
	}{
		{"bad sync flag", []string{"--sync", "sometimes"}, nil, "(set --sync or FOREVER_SYNC)"},
		{"bad sync env", nil, map[string]string{"FOREVER_SYNC": "never"}, "(set --sync or FOREVER_SYNC)"},
		{"bad duration env", nil, map[string]string{"FOREVER_CHUNK_MAX_AGE": "soon"}, "FOREVER_CHUNK_MAX_AGE"},
		{"bad size", []string{"--js-max-store", "lots"}, nil, "js-max-store"},
		{"bad http addr", []string{"--http", "8080"}, nil, "(set --http or FOREVER_HTTP)"},
		{"bad nats listen port", []string{"--nats-listen", "127.0.0.1:99999"}, nil, "(set --nats-listen or FOREVER_NATS_LISTEN)"},
		{"bad log level", []string{"--log-level", "loud"}, nil, "log-level"},
		{"bad log format", nil, map[string]string{"FOREVER_LOG_FORMAT": "xml"}, "FOREVER_LOG_FORMAT"},
		{"negative body timeout", []string{"--http-body-timeout", "-1s"}, nil, "(set --http-body-timeout or FOREVER_HTTP_BODY_TIMEOUT)"},
		{"negative max conns", nil, map[string]string{"FOREVER_HTTP_MAX_CONNS": "-5"}, "FOREVER_HTTP_MAX_CONNS"},
		{"frame ancestor without scheme", []string{"--frame-ancestors", "portal.example.com"}, nil, "(set --frame-ancestors or FOREVER_FRAME_ANCESTORS)"},
		{"frame ancestor with a path", []string{"--frame-ancestors", "https://a.example/x"}, nil, "without path"},
		{"frame ancestor any", nil, map[string]string{"FOREVER_FRAME_ANCESTORS": "https://*"}, "FOREVER_FRAME_ANCESTORS"},
		{"frame ancestor header injection", []string{"--frame-ancestors", "https://a.example;script-src *"}, nil, "frame-ancestors"},
		{"frame ancestor bad port", []string{"--frame-ancestors", "https://a.example:0"}, nil, "port"},
		{"unknown flag", []string{"--nope"}, nil, "nope"},
		{"stray argument", []string{"serve"}, nil, `"serve"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFlags(tt.args, envFrom(tt.env))
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("got %v, want ErrConfig", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || !strings.HasPrefix(msg, "agentd: ") || strings.Contains(msg, "\n") {
				t.Errorf("message %q: want one line starting with agentd: and containing %q", msg, tt.want)
			}
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	if _, err := ParseFlags([]string{"-h"}, envFrom(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("got %v, want flag.ErrHelp", err)
	}
	var b strings.Builder
	Usage(&b)
	for _, want := range []string{"-data", "-nats-url", "-sync", "FOREVER_X_Y", `(default "127.0.0.1:8080")`, "(default 256MiB)", "env FOREVER_NATS_URL"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1024", 1024, true},
		{"64K", 64 << 10, true},
		{"256MiB", 256 << 20, true},
		{"256mb", 256 << 20, true},
		{"10G", 10 << 30, true},
		{"1TiB", 1 << 40, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5G", 0, false},
		{"99999999999T", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
	b := byteSize(10 << 30)
	if got, want := b.String(), "10GiB"; got != want {
		t.Errorf("String: got %q, want %q", got, want)
	}
}

func TestValidate(t *testing.T) {
	var c Config
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c.ChunkMaxAge = -time.Second
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("negative duration: got %v, want ErrConfig", err)
	}
	c.ChunkMaxAge = 0
	c.Registerer = newRegistry()
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("Registerer without Gatherer: got %v, want ErrConfig", err)
	}
}

// TestChartArgs: agentd accepts every flag and variable the Helm chart
// starts a pod with.
func TestChartArgs(t *testing.T) {
	fs := newFlagSet(&Config{})
	for _, name := range chartargs.Flags() {
		if fs.Lookup(name) == nil {
			t.Errorf("the chart passes --%s, which agentd does not define", name)
		}
	}
	pods := []chartargs.Pod{
		{Name: "forever-0", Data: "/data", HTTP: "0.0.0.0:8080", NATSListen: "0.0.0.0:4222",
			Cluster: "forever", ClusterListen: "0.0.0.0:6222",
			Routes:   []string{"nats://forever-0.forever-headless:6222", "nats://forever-1.forever-headless:6222"},
			Replicas: 3, Partitions: 64, LeaseTTL: 10 * time.Second},
		{Name: "forever-0", Data: "/data", HTTP: "0.0.0.0:8080", NATSListen: "0.0.0.0:4222",
			Cluster: "forever", ClusterListen: "0.0.0.0:6222",
			Routes:   []string{"nats://forever-0.forever-headless:6222", "nats://forever-1.forever-headless:6222"},
			Replicas: 3, Partitions: 64, LeaseTTL: 10 * time.Second, AuthSecretFile: chartargs.AuthSecretPath},
		{Name: "forever-0", Data: "/data", HTTP: "0.0.0.0:8080", NATSURL: "nats://nats:4222", Replicas: 3},
	}
	for _, pod := range pods {
		env := map[string]string{}
		for _, kv := range chartargs.Env(pod) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		cfg, err := ParseFlags(chartargs.Args(pod), envFrom(env))
		if err != nil {
			t.Fatalf("%v: %v", chartargs.Args(pod), err)
		}
		if cfg.ServerName != pod.Name || cfg.Replicas != pod.Replicas || len(cfg.Routes) != len(pod.Routes) ||
			cfg.Auth != (pod.AuthSecretFile != "") || cfg.AuthSecretFile != pod.AuthSecretFile {
			t.Errorf("parsed %+v from %v", cfg, chartargs.Args(pod))
		}
	}
}

func TestParseFlagsCORSOrigin(t *testing.T) {
	cfg, err := ParseFlags([]string{"--cors-origin", "https://app.example.com", "--cors-origin", "localhost:*"}, envFrom(map[string]string{"FOREVER_CORS_ORIGIN": "*"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.CORSOrigins, " "); got != "https://app.example.com localhost:*" {
		t.Errorf("flags: %q", got)
	}
	cfg, err = ParseFlags(nil, envFrom(map[string]string{"FOREVER_CORS_ORIGIN": "https://a.example.com\n*.b.example.com\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.CORSOrigins, " "); got != "https://a.example.com *.b.example.com" {
		t.Errorf("env: %q", got)
	}
}

// TestAuthDefaults: auth is off on loopback (the quick start); a
// non-loopback listen without --auth or --insecure refuses to start; auth
// is refused where it cannot run yet; each error names the flag.
func TestAuthDefaults(t *testing.T) {
	env := func(string) string { return "" }
	for _, tc := range []struct {
		args     []string
		auth     bool
		errFlags string // the error names this, empty: no error
	}{
		{args: nil},
		{args: []string{"--http", "localhost:8080"}},
		{args: []string{"--http", "[::1]:0"}},
		{args: []string{"--auth"}, auth: true},
		{args: []string{"--http", "0.0.0.0:8080"}, errFlags: "--insecure"},
		{args: []string{"--nats-listen", "10.1.2.3:4222"}, errFlags: "--nats-listen 10.1.2.3:4222 is not a loopback address"},
		{args: []string{"--http", ":8080"}, errFlags: "--auth"},
		{args: []string{"--http", "0.0.0.0:8080", "--auth"}, auth: true},
		{args: []string{"--http", "0.0.0.0:8080", "--insecure"}},
		{args: []string{"--http", "0.0.0.0:8080", "--nats-url", "nats://x:4222"}, errFlags: "--insecure"},
		{args: []string{"--http", "0.0.0.0:8080", "--nats-url", "nats://x:4222", "--insecure"}},
		{args: []string{"--auth", "--nats-url", "nats://x:4222"}, auth: true},
		{args: []string{"--auth", "--nats-url", "nats://x:4222", "--nats-creds", "c.creds"}, errFlags: "--nats-creds"},
		{args: []string{"--auth", "--cluster-listen", "127.0.0.1:0", "--routes", "127.0.0.1:6222"}, errFlags: "--auth-secret-file"},
		{args: []string{"--auth", "--cluster-listen", "127.0.0.1:0", "--routes", "127.0.0.1:6222", "--auth-secret-file", "/s"}, auth: true},
		{args: []string{"--http", "0.0.0.0:1", "--cluster-listen", "0.0.0.0:0", "--routes", "a:6222", "--insecure"}},
		{args: []string{"--oidc-issuer", "https://issuer"}, errFlags: "--oidc-issuer"},
	} {
		cfg, err := ParseFlags(tc.args, env)
		if tc.errFlags != "" {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.errFlags) {
				t.Errorf("%v: err %v, want one naming %s", tc.args, err, tc.errFlags)
			}
			continue
		}
		if err != nil || cfg.Auth != tc.auth {
			t.Errorf("%v: auth=%v err=%v, want auth=%v", tc.args, cfg.Auth, err, tc.auth)
		}
	}
	cfg, err := ParseFlags(nil, func(k string) string {
		if k == "FOREVER_INSECURE" {
			return "true"
		}
		if k == "FOREVER_HTTP" {
			return "0.0.0.0:80"
		}
		return ""
	})
	if err != nil || cfg.Auth {
		t.Fatalf("FOREVER_INSECURE: auth=%v err=%v", cfg.Auth, err)
	}
}
