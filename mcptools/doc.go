// Package mcptools offers the tools of MCP (Model Context Protocol)
// servers to chat agents as server tools (chat.Tool), using the official
// Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// A Server is either a stdio server, a command run as a subprocess that
// speaks MCP on its stdin and stdout, or a streamable HTTP server at a URL.
// agentd's --mcp flag takes the form ParseServer reads:
//
//	--mcp fs=mcp-server-filesystem /srv/docs   (stdio: command and args, split on whitespace)
//	--mcp web=https://mcp.example.com/mcp      (streamable HTTP)
//
// # Usage
//
//	c, err := mcptools.Connect(ctx, mcptools.Config{Servers: servers, Logger: logger})
//	if err != nil { ... }          // only a bad Config
//	defer c.Close()                // ends the sessions and the subprocesses
//	tools, err := chat.NewTools(append(mine, c.Tools()...)...)
//
// # Invariants
//
//   - Naming. Each MCP tool t of server s becomes the chat tool "s__t"
//     (ChatToolName): server names match ^[a-zA-Z0-9_-]+$ without "__", so
//     the prefix is unambiguous. Its description is the MCP tool's, and its
//     input schema is the MCP tool's input schema, offered to the model as
//     given and checked by chat before each call. A tool whose prefixed
//     name is not a valid chat tool name (longer than 64 characters, or
//     characters such as '.'), or whose schema chat cannot use, is not
//     offered; Connect logs a warning naming it.
//
//   - Safety. A tool is chat.Idempotent only when its annotations say
//     readOnlyHint or idempotentHint; every other tool is chat.Unsafe. So
//     chat re-runs a call cut off by a crash only for tools that declare
//     it harmless, and tells the model the outcome is unknown for the rest.
//
//   - Idempotency key. Every tools/call request carries the call's
//     chat.ToolCall.IdempotencyKey in its _meta under MetaIdempotencyKey
//     ("forever/idempotency-key"). Every run of one model call, across
//     retries, crashes and reconnections, sends the same key, so a server
//     can make a repeated call a no-op.
//
//   - Results. A successful result is shown to the model as its
//     structuredContent when the server sent one; otherwise, when every
//     content part is text, as one JSON string of the parts joined with
//     newlines; otherwise as the content array in MCP's JSON form; and as
//     null when there is no content at all. A result with isError, or a
//     JSON-RPC error answer (such as an unknown tool), is a *chat.ToolError
//     of Type ErrorTypeTool ("mcp_error") carrying the server's text; it is
//     not retryable.
//
//   - Failures never take the process down. A server that cannot be
//     reached, or whose session fails during a call (the process exits,
//     EOF, an HTTP error), gives the model a *chat.ToolError of Type
//     ErrorTypeUnavailable ("mcp_unavailable") whose message names the
//     server and, for a call cut off midway, says whether it may have
//     taken effect. The broken session is dropped (a stdio process is
//     reaped) and the next call reconnects, starting a stdio server's
//     command again. Reconnection is lazy, made by calls, with backoff:
//     after n failed attempts in a row, calls fail at once without trying
//     until MinBackoff*2^(n-1), at most MaxBackoff, has passed. A session
//     that ends while idle is noticed by a watcher goroutine, so the next
//     call reconnects at once.
//
//   - Startup. Connect lists each server's tools (every page) once, within
//     StartTimeout, in parallel. A server that does not answer in time is
//     logged as a warning and left out: its tools are not offered for the
//     life of the Client, even if it comes up later. The set of tools never
//     changes after Connect (notifications/tools/list_changed is ignored);
//     a tool the server dropped fails with "mcp_error" when called.
//
//   - Timeouts and cancellation. Each call runs under the chat tool's
//     timeout (Config.ToolTimeout, default chat.DefaultToolTimeout); when
//     it or the turn ends, the SDK sends notifications/cancelled and the
//     call returns the ctx error, which chat reports as "timeout" or a cut
//     off call. MCP tools are not retried by chat (one attempt per run).
//
//   - Shutdown. Client.Close closes every session: a stdio server's stdin
//     is closed and its process waited for, signalled with SIGTERM and then
//     SIGKILL if it has not exited within TerminateTimeout; an HTTP
//     session is ended with DELETE. Close returns once the Client's
//     goroutines have ended. Calls after Close fail with "mcp_unavailable".
//
// A stdio server inherits the environment of the process; its stderr is
// logged line by line, or goes to Config.Stderr. A Client and its tools
// are safe for concurrent use; concurrent calls to one server share its
// session.
package mcptools
