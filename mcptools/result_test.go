package mcptools

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestResultJSON(t *testing.T) {
	tests := []struct {
		name string
		res  *mcp.CallToolResult
		want string
	}{
		{name: "structured content wins", res: &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: `{"a":1}`}},
			StructuredContent: map[string]any{"a": 1},
		}, want: `{"a":1}`},
		{name: "text parts joined", res: &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: "one"}, &mcp.TextContent{Text: "two"}},
		}, want: `"one\ntwo"`},
		{name: "other parts as the content array", res: &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: "see"}, &mcp.ImageContent{Data: []byte("png"), MIMEType: "image/png"}},
		}, want: `[{"type":"text","text":"see"},{"type":"image","mimeType":"image/png","data":"cG5n"}]`},
		{name: "no content", res: &mcp.CallToolResult{}, want: `null`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resultJSON(tc.res)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSafety(t *testing.T) {
	tests := []struct {
		name string
		ann  *mcp.ToolAnnotations
		want string
	}{
		{"no annotations", nil, "unsafe"},
		{"no hints", &mcp.ToolAnnotations{Title: "x"}, "unsafe"},
		{"readOnlyHint", &mcp.ToolAnnotations{ReadOnlyHint: true}, "idempotent"},
		{"idempotentHint", &mcp.ToolAnnotations{IdempotentHint: true}, "idempotent"},
	}
	for _, tc := range tests {
		if got := Safety(&mcp.Tool{Name: "x", Annotations: tc.ann}).String(); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}
