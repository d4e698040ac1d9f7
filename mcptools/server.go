package mcptools

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrInvalidServer is returned (wrapped, with the reason) by ParseServer,
// Server.Validate and Connect for a server spec that cannot be used: no or
// a bad name, no command, a bad URL.
var ErrInvalidServer = errors.New("mcptools: invalid server")

// ToolSeparator joins a server's name and its tool's name into the name of
// the chat tool: "<server>__<tool>". A server name must not contain it.
const ToolSeparator = "__"

// Server names one MCP server and says how to reach it: either Command (a
// stdio server run as a subprocess) or URL (a streamable HTTP server).
type Server struct {
	// Name prefixes the server's tools ("<Name>__<tool>"). It matches
	// ^[a-zA-Z0-9_-]+$ and does not contain "__".
	Name string
	// Command is the program and its arguments of a stdio server. The
	// program is looked up in PATH.
	Command []string
	// URL is the endpoint of a streamable HTTP server (http or https).
	URL string
}

// ParseServer parses a server spec as given to agentd's --mcp flag:
// "name=command args..." (a stdio server; the part after "=" is split on
// whitespace into the command and its arguments; no quoting) or
// "name=https://..." / "name=http://..." (a streamable HTTP server).
// Errors wrap ErrInvalidServer.
func ParseServer(spec string) (Server, error) {
	name, rest, ok := strings.Cut(spec, "=")
	if !ok {
		return Server{}, fmt.Errorf("%w: %q is not name=command or name=url", ErrInvalidServer, spec)
	}
	s := Server{Name: strings.TrimSpace(name)}
	rest = strings.TrimSpace(rest)
	if lower := strings.ToLower(rest); strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://") {
		s.URL = rest
	} else {
		s.Command = strings.Fields(rest)
	}
	if err := s.Validate(); err != nil {
		return Server{}, err
	}
	return s, nil
}

// Validate checks the name and that exactly one of Command and URL is set
// (a URL must be absolute http or https). Errors wrap ErrInvalidServer.
func (s Server) Validate() error {
	if err := validName(s.Name); err != nil {
		return err
	}
	switch {
	case len(s.Command) > 0 && s.URL != "":
		return fmt.Errorf("%w: server %q has both a command and a URL", ErrInvalidServer, s.Name)
	case s.URL != "":
		u, err := url.Parse(s.URL)
		if err != nil {
			return fmt.Errorf("%w: server %q: URL %q: %v", ErrInvalidServer, s.Name, s.URL, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: server %q: URL %q is not an http:// or https:// URL with a host", ErrInvalidServer, s.Name, s.URL)
		}
	case len(s.Command) == 0 || s.Command[0] == "":
		return fmt.Errorf("%w: server %q has no command (want name=command args... or name=https://...)", ErrInvalidServer, s.Name)
	}
	return nil
}

// String returns the spec ParseServer reads.
func (s Server) String() string {
	if s.URL != "" {
		return s.Name + "=" + s.URL
	}
	return s.Name + "=" + strings.Join(s.Command, " ")
}

// transport names the kind of server for logs: "stdio" or "http".
func (s Server) transport() string {
	if s.URL != "" {
		return "http"
	}
	return "stdio"
}

// validName checks a server name against ^[a-zA-Z0-9_-]+$ without "__".
func validName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: no server name (want name=command or name=url)", ErrInvalidServer)
	}
	for _, c := range []byte(name) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: server name %q: only letters, digits, '_' and '-' are allowed", ErrInvalidServer, name)
		}
	}
	if strings.Contains(name, ToolSeparator) {
		return fmt.Errorf("%w: server name %q must not contain %q, which separates it from the tool's name", ErrInvalidServer, name, ToolSeparator)
	}
	return nil
}
