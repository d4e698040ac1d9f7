package replay

import (
	"encoding/json"
	"net/http"
)

// HeaderMultitask names the multitask policy of a POST /v1/chat (what the
// agent does with a message sent while a turn runs: "reject", "interrupt",
// "enqueue"), for clients that set headers rather than body fields. The
// body's "multitask" field, when set, wins.
const HeaderMultitask = "Forever-Multitask"

// withMultitaskHeader returns body with r's Forever-Multitask header as its
// "multitask" field, unless the body sets one or the header is absent. A
// body that is not a JSON object is returned as it is (parseChatBody
// refused it already).
func withMultitaskHeader(r *http.Request, body json.RawMessage) json.RawMessage {
	h := r.Header.Get(HeaderMultitask)
	if h == "" {
		return body
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil || fields == nil {
		return body
	}
	var set string
	if raw, ok := fields["multitask"]; ok && (json.Unmarshal(raw, &set) != nil || set != "") {
		return body
	}
	v, err := json.Marshal(h)
	if err != nil {
		return body
	}
	fields["multitask"] = v
	out, err := json.Marshal(fields)
	if err != nil {
		return body
	}
	return out
}
