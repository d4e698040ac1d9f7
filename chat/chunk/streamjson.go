package chunk

import (
	"encoding/json"
	"strconv"

	"github.com/forever-agents/forever/internal/jsonstr"
)

// encodeInfo returns json.Marshal(s), built by hand: the streams view
// writes a stream's row at every chunk record it applies (1.35 a chat tool
// call), and reaching its fields through reflection cost more than the
// rest of the write. The row format does not change:
// TestStreamInfoJSONEqualsMarshal compares the two.
func encodeInfo(s StreamInfo) ([]byte, error) {
	started, err := s.StartedAt.MarshalJSON()
	if err != nil {
		return json.Marshal(s)
	}
	updated, err := s.UpdatedAt.MarshalJSON()
	if err != nil {
		return json.Marshal(s)
	}
	var expired []byte
	if !s.ExpiredAt.IsZero() {
		if expired, err = s.ExpiredAt.MarshalJSON(); err != nil {
			return json.Marshal(s)
		}
	}
	b := make([]byte, 0, 224+len(s.Agent)+len(s.Stream)+len(s.RequestID)+len(s.MessageID)+len(s.Error))
	b = append(b, `{"agent":`...)
	b = jsonstr.Append(b, s.Agent)
	b = append(b, `,"stream":`...)
	b = jsonstr.Append(b, s.Stream)
	if s.RequestID != "" {
		b = append(b, `,"requestId":`...)
		b = jsonstr.Append(b, s.RequestID)
	}
	if s.MessageID != "" {
		b = append(b, `,"messageId":`...)
		b = jsonstr.Append(b, s.MessageID)
	}
	b = append(b, `,"status":`...)
	b = jsonstr.Append(b, s.Status)
	if s.Error != "" {
		b = append(b, `,"error":`...)
		b = jsonstr.Append(b, s.Error)
	}
	b = append(b, `,"firstSeq":`...)
	b = strconv.AppendUint(b, uint64(s.FirstSeq), 10)
	b = append(b, `,"lastSeq":`...)
	b = strconv.AppendUint(b, uint64(s.LastSeq), 10)
	b = append(b, `,"chunks":`...)
	b = strconv.AppendInt(b, int64(s.Chunks), 10)
	b = append(b, `,"startedAt":`...)
	b = append(b, started...)
	b = append(b, `,"updatedAt":`...)
	b = append(b, updated...)
	if s.Expired {
		b = append(b, `,"expired":true`...)
	}
	if expired != nil {
		b = append(b, `,"expiredAt":`...)
		b = append(b, expired...)
	}
	return append(b, '}'), nil
}
