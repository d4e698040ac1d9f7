package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/internal/leaderread"
)

// SubjectEnds is one subject of a stream as a view can know it without
// reading it: how many events it holds, and its first and last event.
type SubjectEnds struct {
	Subject string
	// Count is how many events the subject held when it was listed.
	Count uint64
	// First and Last are its first and last stored events (the same event
	// when it holds one). Each is read after the listing, so it may be
	// newer than the listing; a subject emptied meanwhile has neither
	// (First.Seq and Last.Seq 0).
	First, Last Event
	// Err is a *CorruptError when First or Last cannot be decoded (the
	// event then has only its Seq and Subject).
	Err error
}

// endsParallel bounds the reads Ends has in flight.
const endsParallel = 64

// Ends returns every subject of the stream f reads that matches f, with its
// first and last events, and the stream's last sequence when it listed
// them. It reads two events per subject (direct gets; on a replicated
// stream, the leader's answers), not the subjects' events: a view can
// rebuild from it what its events would give, in time that grows with the
// subjects, not the events (the chunks stream's streams view does:
// Projection.Bootstrap). Every event stored at or before the sequence
// returned is in what Ends saw; events stored after may be too. The caller
// owns the slice, ordered by subject.
//
// Errors: ErrInvalid for a bad filter, ErrClosed, or a read error
// (ErrUnavailable when JetStream did not answer in time).
func (l *Log) Ends(ctx context.Context, f Filter) ([]SubjectEnds, Seq, error) {
	subject, stream, err := l.filter(f)
	if err != nil {
		return nil, 0, err
	}
	if l.closed() {
		return nil, 0, ErrClosed
	}
	info, err := l.stream(stream).Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, 0, readFailed("subjects of "+subject, err)
	}
	last := l.seqOf(stream, info.State.LastSeq)
	out := make([]SubjectEnds, 0, len(info.State.Subjects))
	for s, n := range info.State.Subjects {
		out = append(out, SubjectEnds{Subject: s, Count: n})
	}
	slices.SortFunc(out, func(a, b SubjectEnds) int { return strings.Compare(a.Subject, b.Subject) })
	leader := info.Config.Replicas > 1 || !info.Config.AllowDirect
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	sem := make(chan struct{}, endsParallel)
	for i := range out {
		se := &out[i]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := l.fillEnds(ctx, stream, se, leader); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	return out, last, nil
}

// fillEnds reads se's first and last events.
func (l *Log) fillEnds(ctx context.Context, stream string, se *SubjectEnds, leader bool) error {
	get := func(req map[string]any, direct func() (*jetstream.RawStreamMsg, error)) (Event, error) {
		var m *jetstream.RawStreamMsg
		var err error
		if leader {
			m, err = l.leaderMsg(ctx, stream, req)
		} else {
			m, err = direct()
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && m == nil) {
			return Event{}, nil
		}
		if err != nil {
			return Event{}, readFailed("ends of "+se.Subject, err)
		}
		e, _, err := l.decodeRaw(stream, m)
		if err != nil {
			se.Err = err
		}
		return e, nil
	}
	s := l.stream(stream)
	var err error
	se.First, err = get(map[string]any{"next_by_subj": se.Subject, "seq": 1}, func() (*jetstream.RawStreamMsg, error) {
		return s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(se.Subject))
	})
	if err != nil {
		return err
	}
	if se.Count <= 1 {
		// One event when listed: it is also the last as of the listing
		// (later ones are after the sequence Ends returns).
		se.Last = se.First
		return nil
	}
	se.Last, err = get(map[string]any{"last_by_subj": se.Subject}, func() (*jetstream.RawStreamMsg, error) {
		return s.GetLastMsgForSubject(ctx, se.Subject)
	})
	return err
}

// leaderMsg sends a message get request (req, as the JetStream API takes
// it) to the stream's leader and returns the message; nil when there is
// none.
func (l *Log) leaderMsg(ctx context.Context, stream string, req map[string]any) (*jetstream.RawStreamMsg, error) {
	body, _ := json.Marshal(req)
	resp, err := l.askLeader(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	return leaderread.Decode(resp.Data)
}
