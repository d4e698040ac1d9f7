package llm_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/forever-agents/forever/chat/llm"
)

// TestToolJSONIsFrozen: tools are stored in turn.started with the Go field
// names as JSON names (the struct had no tags when history was first
// written); both directions keep them.
func TestToolJSONIsFrozen(t *testing.T) {
	for _, c := range []struct {
		tool llm.Tool
		json string
	}{
		{llm.Tool{Name: "get_weather", Description: "Weather of a city.", Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)},
			`{"Name":"get_weather","Description":"Weather of a city.","Schema":{"type":"object","properties":{"city":{"type":"string"}}}}`},
		{llm.Tool{Name: "now"}, `{"Name":"now","Description":"","Schema":null}`},
	} {
		got, err := json.Marshal(c.tool)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.json {
			t.Errorf("encoded %s\nwant    %s", got, c.json)
		}
		var back llm.Tool
		if err := json.Unmarshal([]byte(c.json), &back); err != nil {
			t.Fatal(err)
		}
		if c.tool.Schema == nil {
			back.Schema = nil // null decodes to the raw "null"
		}
		if !reflect.DeepEqual(back, c.tool) {
			t.Errorf("decoded %+v, want %+v", back, c.tool)
		}
	}
}
