package agents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/forever-agents/forever/internal/apierror"
)

// EventMeta is the event that sets an agent's user context; its data is a
// MetaPatch. The host appends it for the meta verb and for the meta of an
// agent's first command.
const EventMeta = "agent.meta"

// Limits of an agent's user context.
const (
	MaxUserBytes     = 128
	MaxTags          = 32
	MaxTagBytes      = 64
	MaxMetadataBytes = 8 << 10
)

// ErrInvalid marks user context that the limits or the rules refuse.
var ErrInvalid error = apierror.Declare("agents", apierror.BadRequest, "invalid")

// Meta is an agent's user context: who it works for, tags to find it by,
// and free-form metadata (a JSON object).
type Meta struct {
	User     string          `json:"user,omitempty"`
	Tags     []string        `json:"tags,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// MetaPatch changes an agent's Meta; it is the data of EventMeta and the
// payload of the meta verb (which adds nothing else). A field left out
// (nil) is kept as it is.
//
//   - User replaces the user ("" clears it).
//   - Tags replaces the tags; with Merge it adds them to the agent's.
//   - Metadata (a JSON object, or null to clear it) replaces the metadata;
//     with Merge its keys are set one by one, and a key whose value is
//     null is removed.
//   - Initial: the patch applies only while the agent has no user context
//     yet, set by any earlier patch (the meta of a first command).
type MetaPatch struct {
	User     *string         `json:"user,omitempty"`
	Tags     *[]string       `json:"tags,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Merge    bool            `json:"merge,omitempty"`
	Initial  bool            `json:"initial,omitempty"`
}

// Empty reports whether p changes nothing.
func (p MetaPatch) Empty() bool { return p.User == nil && p.Tags == nil && len(p.Metadata) == 0 }

// Validate checks p against the limits: a user of at most MaxUserBytes,
// at most MaxTags tags of 1 to MaxTagBytes bytes each, metadata that is a
// JSON object (or null) of at most MaxMetadataBytes; user and tags are
// UTF-8 without control characters. Errors wrap ErrInvalid and name the
// field.
func (p MetaPatch) Validate() error {
	if p.User != nil {
		if err := checkText("user", *p.User, 0, MaxUserBytes); err != nil {
			return err
		}
	}
	if p.Tags != nil {
		if len(*p.Tags) > MaxTags {
			return fmt.Errorf("%w: tags: %d tags, at most %d", ErrInvalid, len(*p.Tags), MaxTags)
		}
		for _, t := range *p.Tags {
			if err := checkText("tag", t, 1, MaxTagBytes); err != nil {
				return err
			}
		}
	}
	if len(p.Metadata) > 0 {
		if len(p.Metadata) > MaxMetadataBytes {
			return fmt.Errorf("%w: metadata: %d bytes, at most %d", ErrInvalid, len(p.Metadata), MaxMetadataBytes)
		}
		if !isNull(p.Metadata) {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(p.Metadata, &m); err != nil {
				return fmt.Errorf("%w: metadata must be a JSON object", ErrInvalid)
			}
		}
	}
	return nil
}

func checkText(field, s string, minLen, maxLen int) error {
	switch {
	case len(s) < minLen:
		return fmt.Errorf("%w: %s is empty", ErrInvalid, field)
	case len(s) > maxLen:
		return fmt.Errorf("%w: %s %q is %d bytes, at most %d", ErrInvalid, field, s, len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not UTF-8", ErrInvalid, field)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %s %q holds a control character", ErrInvalid, field, s)
		}
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// apply returns m changed by p. It never fails: data the log holds that
// does not fit the rules (Validate) is skipped field by field, so a view
// built from any log is the same.
func (p MetaPatch) apply(m Meta) Meta {
	if p.User != nil && checkText("user", *p.User, 0, MaxUserBytes) == nil {
		m.User = *p.User
	}
	if p.Tags != nil {
		var tags []string
		if p.Merge {
			tags = slices.Clone(m.Tags)
		}
		for _, t := range *p.Tags {
			if checkText("tag", t, 1, MaxTagBytes) == nil {
				tags = append(tags, t)
			}
		}
		slices.Sort(tags)
		tags = slices.Compact(tags)
		if len(tags) > MaxTags {
			tags = tags[:MaxTags]
		}
		m.Tags = tags
	}
	if len(p.Metadata) > 0 && len(p.Metadata) <= MaxMetadataBytes {
		m.Metadata = mergeMetadata(m.Metadata, p.Metadata, p.Merge)
	}
	return m
}

// mergeMetadata returns cur replaced by patch, or with Merge patch's keys
// set into it (null removes one). The result is an object with its keys
// sorted, or nil for none.
func mergeMetadata(cur, patch json.RawMessage, merge bool) json.RawMessage {
	if isNull(patch) {
		if merge {
			return cur
		}
		return nil
	}
	var pm map[string]json.RawMessage
	if json.Unmarshal(patch, &pm) != nil || pm == nil {
		return cur
	}
	out := map[string]json.RawMessage{}
	if merge && len(cur) > 0 && !isNull(cur) {
		if json.Unmarshal(cur, &out) != nil || out == nil {
			out = map[string]json.RawMessage{}
		}
	}
	for k, v := range pm {
		if merge && isNull(v) {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil
	}
	b, err := json.Marshal(out)
	if err != nil {
		return cur
	}
	return b
}
