package agentd

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/forever-agents/forever/mcptools"
)

func TestParseFlagsMCP(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"none", nil, nil, nil},
		{"stdio and http", []string{"--mcp", "fs=mcp-fs --root /srv", "--mcp", "web=https://mcp.example.com/mcp"}, nil,
			[]string{"fs=mcp-fs --root /srv", "web=https://mcp.example.com/mcp"}},
		{"env, one per line", nil, map[string]string{"FOREVER_MCP": "fs=mcp-fs\n\n web=http://127.0.0.1:9000/mcp \n"},
			[]string{"fs=mcp-fs", "web=http://127.0.0.1:9000/mcp"}},
		{"flag beats env", []string{"--mcp", "b=cmd"}, map[string]string{"FOREVER_MCP": "a=cmd"}, []string{"b=cmd"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseFlags(tc.args, envFrom(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.MCP, tc.want) {
				t.Errorf("MCP = %q, want %q", cfg.MCP, tc.want)
			}
			servers, err := cfg.MCPServers()
			if err != nil || len(servers) != len(tc.want) {
				t.Errorf("MCPServers = %+v, %v", servers, err)
			}
		})
	}

	cfg, err := ParseFlags([]string{"--mcp", "fs=mcp-fs  --root /srv", "--mcp", "web=https://h/mcp"}, envFrom(nil))
	if err != nil {
		t.Fatal(err)
	}
	servers, err := cfg.MCPServers()
	if err != nil {
		t.Fatal(err)
	}
	if got := servers[0]; got.Name != "fs" || !slices.Equal(got.Command, []string{"mcp-fs", "--root", "/srv"}) || got.URL != "" {
		t.Errorf("stdio server %+v", got)
	}
	if got := servers[1]; got.Name != "web" || got.URL != "https://h/mcp" || got.Command != nil {
		t.Errorf("http server %+v", got)
	}
}

func TestParseFlagsMCPInvalid(t *testing.T) {
	tests := []struct{ value, want string }{
		{"cmd-without-name", "not name=command or name=url"},
		{"=cmd", "no server name"},
		{"my server=cmd", "only letters, digits"},
		{"a.b=cmd", "only letters, digits"},
		{"a__b=cmd", `must not contain "__"`},
		{"srv=", "has no command"},
		{"srv=  ", "has no command"},
		{"", "not name=command"},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			_, err := ParseFlags([]string{"--mcp", tc.value}, envFrom(nil))
			if !errors.Is(err, ErrConfig) || !errors.Is(err, mcptools.ErrInvalidServer) {
				t.Fatalf("got %v, want ErrConfig and mcptools.ErrInvalidServer", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "agentd: invalid --mcp value ") || !strings.Contains(msg, tc.want) ||
				!strings.HasSuffix(msg, "(set --mcp or FOREVER_MCP)") {
				t.Errorf("message %q, want it to name --mcp and say %q", msg, tc.want)
			}
		})
	}
	_, err := ParseFlags([]string{"--mcp", "a=x", "--mcp", "a=https://h/"}, envFrom(nil))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `server name "a" is used twice`) {
		t.Errorf("two servers named a: %v", err)
	}
	_, err = ParseFlags(nil, envFrom(map[string]string{"FOREVER_MCP": "a__b=x"}))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "FOREVER_MCP") {
		t.Errorf("bad FOREVER_MCP: %v", err)
	}
}

func TestMCPUsage(t *testing.T) {
	var b strings.Builder
	Usage(&b)
	if !strings.Contains(b.String(), "-mcp name=command args...") || !strings.Contains(b.String(), "env FOREVER_MCP") {
		t.Errorf("usage does not document --mcp:\n%s", b.String())
	}
}
