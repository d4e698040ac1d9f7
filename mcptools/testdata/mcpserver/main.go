// Command mcpserver is the MCP server the mcptools tests run: a real
// go-sdk server, over stdio by default or streamable HTTP with -http.
//
// Tools:
//
//   - echo (readOnlyHint): answers its text as text content.
//   - record (no hints): appends "record <key>" to the -record file, key being
//     the request's _meta "forever/idempotency-key", and answers it as
//     structured content {"key": ..., "pid": ...}.
//   - fail (readOnlyHint): answers isError with "boom: <text>".
//   - hang (no hints): appends "hang <pid>" to the -record file and blocks
//     until the call is cancelled or the process dies.
//
// At start it appends "start <pid>" to the -record file. With -http it
// prints "listening <addr>" on stdout once it accepts connections.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	httpAddr := flag.String("http", "", "serve streamable HTTP on this host:port instead of stdio")
	record := flag.String("record", "", "file to append records to")
	pageSize := flag.Int("page-size", 0, "tools per page of tools/list (0: the SDK default)")
	flag.Parse()

	rec := &recorder{path: *record}
	rec.add(fmt.Sprintf("start %d", os.Getpid()))
	srv := newServer(rec, *pageSize)
	if *httpAddr == "" {
		if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening %s\n", ln.Addr())
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	log.Fatal(http.Serve(ln, h))
}

// recorder appends lines to a file; with no path it does nothing.
type recorder struct {
	mu   sync.Mutex
	path string
}

func (r *recorder) add(line string) {
	if r.path == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.OpenFile(r.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		log.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		log.Fatal(err)
	}
}

type textIn struct {
	Text string `json:"text" jsonschema:"the text"`
}

type recordOut struct {
	Key string `json:"key"`
	PID int    `json:"pid"`
}

func newServer(rec *recorder, pageSize int) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcpserver", Version: "v0.0.1"}, &mcp.ServerOptions{PageSize: pageSize})
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echoes its text.", Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "record", Description: "Records the call's idempotency key."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, recordOut, error) {
			key, _ := req.Params.Meta["forever/idempotency-key"].(string)
			rec.add("record " + key)
			return nil, recordOut{Key: key, PID: os.Getpid()}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "fail", Description: "Always fails.", Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("boom: " + in.Text)
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "hang", Description: "Blocks until cancelled."},
		func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
			rec.add(fmt.Sprintf("hang %d", os.Getpid()))
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	return srv
}
