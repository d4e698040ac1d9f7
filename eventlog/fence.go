package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/forever-agents/forever/internal/leaderread"
)

// Headers that name the writer of every event appended under an Owner, so a
// checker can prove from the log alone that no two owners wrote one agent's
// subjects interleaved: along one subject, epochs never go back.
const (
	HeaderNode  = "Forever-Node"
	HeaderEpoch = "Forever-Epoch"
)

// Token is a writer's claim on an agent: the node that writes and the epoch
// of the lease it writes under. Epochs of one agent only grow.
type Token struct {
	Node  string
	Epoch uint64
}

// Owner tells the Log whether this process may write an agent's subjects
// now, and under which token. agentd's partition leases implement it. A Log
// with an Owner fences every append to an agent's subjects (see Config.Owner).
type Owner interface {
	Token(agent string) (Token, bool)
}

// fences is the Log's fence table: per agent, the last sequence this
// process knows on the agent's subjects, under the token it last wrote with.
type fences struct {
	mu sync.Mutex
	m  map[string]*fence
}

// fence serializes one agent's event appends (sem) and holds the sequences
// the next appends must expect.
type fence struct {
	sem chan struct{} // held across an event append: the expected sequence chains

	mu struct {
		sync.Mutex
		tok     Token
		known   bool           // last is the subject's last sequence
		last    Seq            // last sequence on the agent's events subject
		streams map[string]Seq // chat stream -> last sequence of its chunks
		dead    error          // a conflict under tok: another writer took over
	}
}

func (fs *fences) get(agent string) *fence {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m = map[string]*fence{}
	}
	f := fs.m[agent]
	if f == nil {
		f = &fence{sem: make(chan struct{}, 1)}
		f.mu.streams = map[string]Seq{}
		fs.m[agent] = f
	}
	return f
}

// syncTokenLocked resets the fence when the token changed: a new lease, so
// nothing this process knew about the subjects still holds.
// REQUIRES: f.mu held.
func (f *fence) syncTokenLocked(tok Token) {
	if f.mu.tok == tok {
		return
	}
	f.mu.tok = tok
	f.mu.known = false
	f.mu.dead = nil
	clear(f.mu.streams)
}

// claim checks that this process owns agent and returns its fence and
// token. Errors: ErrNotOwner, or ErrFenced after a conflict under the same
// token.
func (l *Log) claim(agent string) (*fence, Token, error) {
	tok, ok := l.cfg.Owner.Token(agent)
	if !ok {
		return nil, Token{}, fmt.Errorf("%w: agent %q", ErrNotOwner, agent)
	}
	f := l.fences.get(agent)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncTokenLocked(tok)
	if f.mu.dead != nil {
		return nil, Token{}, fmt.Errorf("%w: agent %q: %v", ErrFenced, agent, f.mu.dead)
	}
	return f, tok, nil
}

// fenced runs publish for an event append of agent under its fence: the
// agent's appends are serialized, the expected last sequence is the one the
// previous append left, and a conflict marks the agent fenced for this token
// and tells Config.OnFenced. expect is the caller's own condition
// (ExpectSeq), checked against the fence before anything is sent.
func (l *Log) fenced(ctx context.Context, agent string, m *nats.Msg, expect *Seq,
	publish func(expect *Seq) (Seq, error)) (Seq, error) {
	if held := l.held.Load(); held != nil {
		return 0, fmt.Errorf("%w: agent %q: %v", ErrRemoved, agent, *held)
	}
	f, tok, err := l.claim(agent)
	if err != nil {
		return 0, err
	}
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, notSent(ctx.Err())
	}
	defer func() { <-f.sem }()
	if err := ctx.Err(); err != nil {
		return 0, notSent(err)
	}

	f.mu.Lock()
	f.syncTokenLocked(tok)
	dead, known, last := f.mu.dead, f.mu.known, f.mu.last
	f.mu.Unlock()
	if dead != nil {
		return 0, fmt.Errorf("%w: agent %q: %v", ErrFenced, agent, dead)
	}
	if !known {
		if last, err = l.leaderLastSeq(ctx, l.streamFor(agent, false), l.EventsSubject(agent)); err != nil {
			return 0, err
		}
	}
	if expect != nil && *expect != last {
		// The caller's compare-and-set lost against this process's own
		// log: no other writer is involved.
		return 0, fmt.Errorf("%w: expected last sequence %d of %q, it is %d", ErrConflict, *expect, agent, last)
	}
	stamp(m, tok)
	seq, err := publish(l.skewed(m, last))
	unsure := false
	if errors.Is(err, ErrConflict) {
		// A write of ours whose acknowledgement was lost (a stream leader
		// changing) also moves the subject on. If the subject's last
		// message is ours, this append was refused and nothing else wrote:
		// send it again after that message. If the subject cannot be read,
		// nobody is fenced yet: the next append reads it again.
		ls, w, lerr := l.leaderLast(ctx, l.streamFor(agent, false), l.EventsSubject(agent))
		switch {
		case lerr != nil:
			unsure = true
			err = fmt.Errorf("eventlog: append for %q conflicted and its subject cannot be read now: %w", agent, lerr)
		case ls < last:
			// Writers only add: a subject that went back lost events.
			err = fmt.Errorf("%w: agent %q: %s holds its events up to %d, this process wrote up to %d: %w",
				ErrRemoved, agent, l.streamFor(agent, false), ls, last, err)
		case ls == last:
			// The subject is where this writer left it: a stream leader
			// that had not caught up with its log refused the append (a
			// leader change). Nobody else wrote; nothing was stored.
			unsure = true
			err = fmt.Errorf("%w: agent %q: %v", errRefused, agent, err) // not ErrConflict: nobody else wrote
		case w != tok && w.Node != "":
			err = fmt.Errorf("%w (node %s, epoch %d, wrote it last; this node holds epoch %d)", err, w.Node, w.Epoch, tok.Epoch)
		case w == tok && ls > last:
			l.logger.Info("append after a write of ours whose ack was lost; sending it again",
				"agent", agent, "expected", last, "last", ls)
			last = ls
			seq, err = publish(&last)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.tok != tok {
		return seq, err // a new lease came meanwhile; it starts from the log
	}
	switch {
	case unsure, errors.Is(err, ErrRemoved):
		f.mu.known = false
	case err == nil:
		f.mu.known, f.mu.last = true, seq
	case errors.Is(err, ErrDuplicate):
		f.mu.known, f.mu.last = true, last
	case errors.Is(err, ErrConflict):
		f.mu.dead = err
		l.reportFenced(agent, err)
		return 0, fmt.Errorf("%w: agent %q: %v", ErrFenced, agent, err)
	default:
		// The append may have been stored or not: read the subject again
		// before the next one rather than fence ourselves out.
		f.mu.known = false
	}
	return seq, err
}

// Unfence lets this process write agent again under its current token
// after a conflict fenced it. Call it only once the agent's lease was read
// again and is still this process's (the conflicting write came from a
// writer that lost the agent before it noticed), and after stopping what
// ran for the agent, so it restarts from the log: the next append reads
// the subject's last sequence again.
func (l *Log) Unfence(agent string) {
	f := l.fences.get(agent)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.dead, f.mu.known = nil, false
	clear(f.mu.streams)
}

// ForgetFences makes every agent's next append read its subject's last
// sequence again, for all agents this process wrote: call it after a
// stream of the log was created again, so that appends go on from what the
// new stream holds instead of expecting what the old one held. It does not
// lift a fence set by another writer (see Unfence).
func (l *Log) ForgetFences() {
	l.fences.mu.Lock()
	all := make([]*fence, 0, len(l.fences.m))
	for _, f := range l.fences.m {
		all = append(all, f)
	}
	l.fences.mu.Unlock()
	for _, f := range all {
		f.mu.Lock()
		f.mu.known = false
		clear(f.mu.streams)
		f.mu.Unlock()
	}
}

// reportFenced tells Config.OnFenced, off the caller's goroutine.
func (l *Log) reportFenced(agent string, err error) {
	l.logger.Warn("append conflicted: another writer took the agent over; this process stops writing it",
		"agent", agent, "err", err)
	if l.cfg.OnFenced != nil {
		go l.cfg.OnFenced(agent, err)
	}
}

// skews reports whether the test hook skewExpect asks to skew m's
// expected sequence.
func (l *Log) skews(m *nats.Msg) bool {
	return l.skewExpect != nil && l.skewExpect(m.Subject, m.Header.Get(jetstream.MsgIDHeader))
}

// skewed returns the expected sequence the event append m sends:
// last, or, under the test hook skewExpect, one its subject does not have,
// so JetStream refuses the append as a leader behind its log does.
func (l *Log) skewed(m *nats.Msg, last Seq) *Seq {
	if l.skews(m) {
		wrong := last + skew
		return &wrong
	}
	return &last
}

// skew is how far skewExpect moves an expected sequence.
const skew = 1 << 20

// skewHeader applies skewExpect to a message sent with an expected last
// subject sequence header (a chunk send).
func (l *Log) skewHeader(m *nats.Msg) {
	v := m.Header.Get(headerExpectedLastSubSeq)
	if v == "" || !l.skews(m) {
		return
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return
	}
	m.Header.Set(headerExpectedLastSubSeq, seqString(Seq(n)+skew))
}

// stamp sets the writer headers.
func stamp(m *nats.Msg, tok Token) {
	m.Header[HeaderNode] = []string{tok.Node}
	m.Header[HeaderEpoch] = []string{strconv.FormatUint(tok.Epoch, 10)}
}

// WriterOf returns the writer token stored in a message's headers, if any.
func WriterOf(h nats.Header) (Token, bool) {
	node := h.Get(HeaderNode)
	if node == "" {
		return Token{}, false
	}
	epoch, err := strconv.ParseUint(h.Get(HeaderEpoch), 10, 64)
	if err != nil {
		return Token{}, false
	}
	return Token{Node: node, Epoch: epoch}, true
}

// prepareChunks makes sure the fence of agent knows the last sequence of a
// chat stream's chunks before its first chunk is queued, so the Batcher can
// fence the stream without I/O of its own. It stamps m with the token.
func (l *Log) prepareChunks(ctx context.Context, agent, stream string, m *nats.Msg) error {
	f, tok, err := l.claim(agent)
	if err != nil {
		return err
	}
	f.mu.Lock()
	_, known := f.mu.streams[stream]
	f.mu.Unlock()
	if !known {
		last, err := l.leaderLastSeq(ctx, l.streamFor(agent, true), l.ChunksSubject(agent, stream))
		if err != nil {
			return err
		}
		f.mu.Lock()
		if f.mu.tok == tok {
			if _, known := f.mu.streams[stream]; !known {
				f.mu.streams[stream] = last
			}
		}
		f.mu.Unlock()
	}
	stamp(m, tok)
	return nil
}

// chunkFence is the fence state of one chat stream inside a batch.
type chunkFence struct {
	f      *fence
	tok    Token
	agent  string
	stream string
	expect Seq
	first  int // index in the batch of the stream's first message
	last   int // index of its last message
}

// fenceChunks sets the expected last subject sequence on the first message
// of each chat stream in msgs and returns the fences, by subject. Events
// whose agent is not owned or fenced get their error in errs and must not be
// sent.
func (l *Log) fenceChunks(evs []*Event, msgs []*nats.Msg, errs []error) map[string]*chunkFence {
	out := map[string]*chunkFence{}
	for i, e := range evs {
		if errs[i] != nil {
			continue
		}
		subj := msgs[i].Subject
		if cf, ok := out[subj]; ok {
			cf.last = i
			msgs[i].Header.Del(headerExpectedLastSubSeq)
			continue
		}
		f, tok, err := l.claim(e.Agent)
		if err != nil {
			errs[i] = err
			continue
		}
		f.mu.Lock()
		last, known := f.mu.streams[e.Stream]
		f.mu.Unlock()
		if !known {
			errs[i] = fmt.Errorf("%w: chunk of %q/%q queued without its stream's fence (reset meanwhile, after a send of unknown fate or under a new lease)", errUnfenced, e.Agent, e.Stream)
			continue
		}
		msgs[i].Header.Set(headerExpectedLastSubSeq, seqString(last))
		out[subj] = &chunkFence{f: f, tok: tok, agent: e.Agent, stream: e.Stream, expect: last, first: i, last: i}
	}
	return out
}

// advanceChunks records the sequences a committed batch left on each stream.
func advanceChunks(fs map[string]*chunkFence, seqOf func(i int) Seq) {
	for _, cf := range fs {
		cf.f.mu.Lock()
		if cf.f.mu.tok == cf.tok {
			cf.f.mu.streams[cf.stream] = seqOf(cf.last)
		}
		cf.f.mu.Unlock()
	}
}

// staleChunks finds, after a conflicting send, the streams whose chunks
// another writer appended (it marks their agents fenced) or that lost
// chunks under this writer (ErrRemoved; their fences are forgotten), and
// returns their subjects with the error of each. A stream whose last chunk
// is this writer's own (a chunk whose acknowledgement was lost, a
// duplicate) is not stale: its fence moves to that chunk, and moved
// reports it, so the chunks can be sent again.
func (l *Log) staleChunks(ctx context.Context, fs map[string]*chunkFence) (stale map[string]error, moved bool, err error) {
	stale = map[string]error{}
	for subj, cf := range fs {
		last, w, err := l.leaderLast(ctx, l.streamFor(cf.agent, true), subj)
		if err != nil {
			return nil, false, err
		}
		if last == cf.expect {
			continue
		}
		if last < cf.expect {
			// Writers only add: the stream's chunks were removed (a purge
			// or a deletion of the chunks stream). Not another writer: the
			// next chunk reads the subject again.
			cf.f.mu.Lock()
			if cf.f.mu.tok == cf.tok {
				delete(cf.f.mu.streams, cf.stream)
			}
			cf.f.mu.Unlock()
			stale[subj] = fmt.Errorf("%w: chunks of %q/%q: %s holds them up to %d, this process wrote up to %d: %w",
				ErrRemoved, cf.agent, cf.stream, l.streamFor(cf.agent, true), last, cf.expect, ErrConflict)
			continue
		}
		if w == cf.tok {
			cf.f.mu.Lock()
			if cf.f.mu.tok == cf.tok {
				cf.f.mu.streams[cf.stream] = last
				moved = true
			}
			cf.f.mu.Unlock()
			continue
		}
		err = fmt.Errorf("%w: chunks of %q/%q: expected last sequence %d, the log has %d (written by node %s at epoch %d; this node holds epoch %d)",
			ErrConflict, cf.agent, cf.stream, cf.expect, last, w.Node, w.Epoch, cf.tok.Epoch)
		cf.f.mu.Lock()
		if cf.f.mu.tok == cf.tok && cf.f.mu.dead == nil {
			cf.f.mu.dead = err
			l.reportFenced(cf.agent, err)
		}
		cf.f.mu.Unlock()
		stale[subj] = fmt.Errorf("%w: agent %q: %v", ErrFenced, cf.agent, err)
	}
	return stale, moved, nil
}

// unreadableRefusal is the error of chunk sends refused (err) whose
// streams could not be read (serr) to tell who wrote last: nothing was
// stored, and the next try reads them again.
func unreadableRefusal(err, serr error) error {
	return fmt.Errorf("%w: a chunk was refused (%v) and its stream cannot be read to tell why: %w", ErrUnavailable, err, serr)
}

// leaderLastSeq returns the last sequence on subject as the stream's leader
// knows it. Direct gets may be answered by a replica that lags behind, which
// is fine for reading chunks but not for fencing or read-your-writes.
func (l *Log) leaderLastSeq(ctx context.Context, stream, subject string) (Seq, error) {
	seq, _, err := l.leaderLast(ctx, stream, subject)
	return seq, err
}

// leaderLast is leaderLastSeq with the writer of that last message (zero
// when it has none, or there is no message).
func (l *Log) leaderLast(ctx context.Context, stream, subject string) (Seq, Token, error) {
	seq, tok, err := l.leaderGet(ctx, stream, map[string]any{"last_by_subj": subject})
	if err != nil {
		return 0, Token{}, readFailed("last sequence of "+subject, err)
	}
	return seq, tok, nil
}

// leaderFirstSeq returns the sequence of the first message stored on
// subject, asking the stream's leader; 0 when there is none.
func (l *Log) leaderFirstSeq(ctx context.Context, stream, subject string) (Seq, error) {
	seq, _, err := l.leaderGet(ctx, stream, map[string]any{"next_by_subj": subject, "seq": 1})
	if err != nil {
		return 0, readFailed("first sequence of "+subject, err)
	}
	return seq, nil
}

// leaderGet sends a message get request (req, as the JetStream API takes
// it) to the stream's leader, not to any replica as a direct get may be
// answered. It returns the message's sequence and writer; 0 when there is
// no such message.
//
// A read refused while the stream elects a leader (10008, or no
// responders: the leaders' spread steps one down under load, a node
// leaves) is sent again after noResponderWait, doubling, for about 1.5 s
// as a batch commit is: a read writes nothing, and failing it failed the
// turn that read it (a 503, its fiber left for recovery).
func (l *Log) leaderGet(ctx context.Context, stream string, req map[string]any) (Seq, Token, error) {
	for wait := noResponderWait; ; wait *= 2 {
		seq, tok, err := l.leaderGetOnce(ctx, stream, req)
		if err == nil || !Unwritten(err) || wait > noResponderMaxWait || !sleepCtx(ctx, wait) {
			return seq, tok, err
		}
	}
}

// leaderGetOnce is one try of leaderGet.
func (l *Log) leaderGetOnce(ctx context.Context, stream string, req map[string]any) (Seq, Token, error) {
	if l.closed() {
		return 0, Token{}, ErrClosed
	}
	if l.refuseLeaderGet != nil && l.refuseLeaderGet() {
		return 0, Token{}, &jetstream.APIError{Code: 503, ErrorCode: codeClusterUnavailable, Description: "JetStream system temporarily unavailable"}
	}
	body, _ := json.Marshal(req)
	resp, err := l.askLeader(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return 0, Token{}, err
	}
	m, err := leaderread.Decode(resp.Data)
	if err != nil || m == nil {
		return 0, Token{}, err
	}
	tok, _ := WriterOf(m.Header)
	return l.seqOf(stream, m.Sequence), tok, nil
}

// stampLike copies the writer headers of from onto m.
func stampLike(m, from *nats.Msg) {
	m.Header[HeaderNode] = from.Header[HeaderNode]
	m.Header[HeaderEpoch] = from.Header[HeaderEpoch]
}

// forgetChunks drops what the fences knew about the streams of a batch whose
// outcome is unknown (it may have been stored): their next chunks read the
// stream's last sequence again instead of conflicting with our own write.
func forgetChunks(fs map[string]*chunkFence) {
	for _, cf := range fs {
		cf.f.mu.Lock()
		if cf.f.mu.tok == cf.tok {
			delete(cf.f.mu.streams, cf.stream)
		}
		cf.f.mu.Unlock()
	}
}

// CheckWriters proves from the log alone that no two owners wrote one
// subject interleaved: evs are the events of one subject (an agent's events,
// or one chat stream's chunks) in stream order, and along them the writers'
// epochs never go back. Events without a writer (appended with no Owner) are
// skipped. It returns an error naming the first event that breaks the rule.
func CheckWriters(evs []Event) error {
	var cur Token
	var at Seq
	for _, e := range evs {
		if e.Writer.Node == "" {
			continue
		}
		if e.Writer.Epoch < cur.Epoch {
			return fmt.Errorf("eventlog: %s: event %d (%s) written by %s at epoch %d after %s wrote at epoch %d (seq %d)",
				e.Subject, e.Seq, e.Type, e.Writer.Node, e.Writer.Epoch, cur.Node, cur.Epoch, at)
		}
		if e.Writer.Epoch == cur.Epoch && cur.Epoch != 0 && e.Writer.Node != cur.Node {
			return fmt.Errorf("eventlog: %s: event %d written by %s and event %d by %s under the same epoch %d",
				e.Subject, e.Seq, e.Writer.Node, at, cur.Node, cur.Epoch)
		}
		cur, at = e.Writer, e.Seq
	}
	return nil
}
