package blob

import (
	"bytes"
	"fmt"
	"iter"
	"regexp"
	"strconv"

	"github.com/forever-agents/forever/eventlog"
)

// ViewName is the name of the references view (RefsView).
const ViewName = "blobrefs"

// refPattern finds the references a JSON document holds: a Ref encodes as
// {"digest":"sha256:<hex>","size":N}.
var refPattern = regexp.MustCompile(`"digest":"sha256:([0-9a-f]{64})","size":([0-9]+)`)

// refMarker is what every encoded Ref holds: data without it holds none.
var refMarker = []byte(`"digest":"sha256:`)

// FindRefs returns the references data (JSON, such as an event's data)
// holds, in the order they appear, repeats included. It finds them by
// their encoding, wherever they are nested, so a new event that holds a
// Ref needs no change here.
func FindRefs(data []byte) []Ref {
	if !bytes.Contains(data, refMarker) {
		return nil
	}
	var out []Ref
	for _, m := range refPattern.FindAllSubmatch(data, -1) {
		size, err := strconv.ParseInt(string(m[2]), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, Ref{Digest: DigestPrefix + string(m[1]), Size: size})
	}
	return out
}

// refKey is the row of a reference agent holds to the object name (the
// digest's hex): "<agent>\x00<name>". Agent ids are subject tokens, which
// hold no NUL, so an agent's prefix never matches another agent's rows.
func refKey(agent, name string) []byte { return []byte(agent + "\x00" + name) }

func agentPrefix(agent string) []byte { return []byte(agent + "\x00") }

// RefsView returns the references view of the events stream: a row per
// (agent, object) for every object an agent's stored events name. It is
// what Sweeper reads to know which objects are still needed.
//
// An agent's rows go when the agent is deleted (its tombstone drops them,
// as it drops every view's rows), and stay through a compaction (the
// snapshot keeps them): an object an agent once named stays needed until
// the agent is deleted, even if a later compaction dropped the event that
// named it. A fork (eventlog.TypeForked) reads its parent's history up to
// its cut by reference, so it takes a row for every object its parent
// names when it is made: the parent's delete then leaves the fork's rows,
// and a fork of a fork inherits in turn. A snapshot part is searched for
// references in every view's rows too, so an agent compacted before this
// view existed keeps what its snapshot names.
func RefsView() eventlog.Projection {
	return eventlog.Projection{
		Name:    ViewName,
		Version: 1,
		Filter:  eventlog.Filter{},
		Apply:   applyRefs,
		AgentRows: func(r eventlog.Reader, agent string) iter.Seq2[eventlog.KV, error] {
			return eventlog.Rows(r, nil, [][]byte{agentPrefix(agent)})
		},
	}
}

func applyRefs(b *eventlog.Batch, e eventlog.Event) error {
	switch e.Type {
	case eventlog.TypeForked:
		var f eventlog.Forked
		if err := e.Decode(&f); err != nil || f.Parent == "" || f.Parent == e.Agent {
			return nil // not a fork the views take either
		}
		var names []string
		p := agentPrefix(f.Parent)
		for kv, err := range b.Scan(p) {
			if err != nil {
				return err
			}
			names = append(names, string(kv.Key[len(p):]))
		}
		for _, n := range names {
			if err := b.Set(refKey(e.Agent, n), nil); err != nil {
				return err
			}
		}
		return nil
	case eventlog.TypeSnapshot:
		var s eventlog.Snapshot
		if err := e.Decode(&s); err != nil {
			return nil // quarantined by the views that read it
		}
		for name, v := range s.Views {
			if name == ViewName {
				continue // already in place
			}
			for _, kv := range v.Rows {
				if err := setRefs(b, e.Agent, kv.Value); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return setRefs(b, e.Agent, e.Data)
}

// setRefs writes a row for each reference data holds.
func setRefs(b *eventlog.Batch, agent string, data []byte) error {
	for _, r := range FindRefs(data) {
		name, err := r.Name()
		if err != nil {
			continue
		}
		if err := b.Set(refKey(agent, name), nil); err != nil {
			return err
		}
	}
	return nil
}

// Referenced returns the object names (digest hex) some agent's row in
// the references view r names.
func Referenced(r eventlog.Reader) (map[string]bool, error) {
	out := map[string]bool{}
	for kv, err := range r.Scan(nil) {
		if err != nil {
			return nil, fmt.Errorf("blob: read the references view: %w", err)
		}
		_, name, ok := bytes.Cut(kv.Key, []byte{0})
		if !ok {
			return nil, &eventlog.CorruptError{What: "blobrefs row " + strconv.Quote(string(kv.Key)), Err: fmt.Errorf("no agent separator")}
		}
		out[string(name)] = true
	}
	return out, nil
}
