package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"

	"github.com/forever-agents/forever/eventlog"
	"github.com/forever-agents/forever/internal/apierror"
)

// A stock AI SDK client (useChat) sends the whole conversation in every
// request, so a body grows with the conversation while a turn needs only
// its last message: the new user message, or the assistant message
// answering client tools. The gateway reads the body as a stream of JSON
// tokens and keeps the last message whole and, of the earlier ones, their
// count, the last one's id and a digest of their ids (History): the body
// limit bounds what is new (the last message and the other fields), not the
// conversation, and what the turn is sent does not grow with it.

// History sums up the messages of a request before its last one, which
// the gateway does not pass on: how many there were, the id of the last of
// them, and a digest of their ids, roles and user texts in order. The chat
// agent compares it with its stored conversation (an AI SDK client that
// dropped or edited messages). It travels in the chat command's payload as
// "history".
type History struct {
	Count  int    `json:"count"`
	LastID string `json:"lastId,omitempty"`
	Digest string `json:"digest"`
}

// HistoryDigest builds a History message by message.
type HistoryDigest struct {
	h      hash.Hash
	count  int
	lastID string
}

// Add adds the next message: its id, role, and the text of its text parts
// (counted for user messages only: an assistant message's stored parts
// need not match the client's rendering of them).
func (d *HistoryDigest) Add(id, role string, texts []string) {
	if d.h == nil {
		d.h = sha256.New()
	}
	d.count++
	d.lastID = id
	write := func(s string) {
		var n [20]byte
		d.h.Write(strconv.AppendInt(n[:0], int64(len(s)), 10))
		d.h.Write([]byte{':'})
		io.WriteString(d.h, s)
	}
	write(id)
	write(role)
	if role == "user" {
		for _, t := range texts {
			write(t)
		}
	}
	d.h.Write([]byte{';'})
}

// History returns the summary of the messages added so far.
func (d *HistoryDigest) History() History {
	if d.h == nil {
		d.h = sha256.New()
	}
	return History{Count: d.count, LastID: d.lastID, Digest: hex.EncodeToString(d.h.Sum(nil)[:16])}
}

// bodyReader reads one AI SDK body from a stream of tokens. Everything it
// keeps (the fields other than messages, and one message) counts against
// left; earlier messages are summed up in hist and dropped.
type bodyReader struct {
	dec     *json.Decoder
	left    int64 // bytes the kept values may still take
	over    bool  // a kept value went past the limit
	subject string
	prefix  string
}

// chatBody is what readChatBody keeps of a body.
type chatBody struct {
	fields   map[string]any // every top-level field but "messages"
	last     any            // the last message, nil when over
	lastOver bool
	count    int
	hist     HistoryDigest
	notArray string // the kind of a "messages" that is not an array
	lastCost int64  // what the last message was charged
}

// readBody reads an AI SDK request body {id, messages, ...} from r and
// returns the request and the body the turn is sent: the same fields, with
// messages cut to the last one and "history" summing up the others.
// limit bounds what is kept (the last message and the other fields), not
// the earlier messages. Errors are *apierror.Error: 413 when what is kept
// is over the limit, 400 wrapping ErrBadRequest else, naming the field as
// the client sent it (within prefixes it: "body" of a WebSocket frame).
func readBody(r io.Reader, limit int64, within string) (chatRequest, json.RawMessage, error) {
	br := &bodyReader{dec: json.NewDecoder(r), left: limit, subject: "the body"}
	if within != "" {
		br.subject, br.prefix = strconv.Quote(within), within+"."
	}
	br.dec.UseNumber()
	b, err := br.read()
	if err != nil {
		return chatRequest{}, nil, err
	}
	id, isString := b.fields["id"].(string)
	switch {
	case b.fields["id"] == nil:
		return chatRequest{}, nil, badRequest(`%s has no "id": set it to the chat id (the agent's id)`, br.subject)
	case !isString:
		return chatRequest{}, nil, badRequest(`%q must be a string, got %s`, br.prefix+"id", kindOf(b.fields["id"]))
	case !eventlog.ValidToken(id):
		return chatRequest{}, nil, badAgentID(strconv.Quote(br.prefix+"id"), id)
	case b.notArray != "":
		return chatRequest{}, nil, badRequest("%q must be an array, got %s", br.prefix+"messages", b.notArray)
	case b.count == 0:
		return chatRequest{}, nil, badRequest(`%s has no "messages": send the conversation, ending with the new user message`, br.subject)
	case b.lastOver || br.over:
		return chatRequest{}, nil, apierror.New(apierror.TooLarge, "the new message and the other fields of the request are larger than the limit of %d bytes; the earlier messages do not count, but a message must fit", limit)
	}
	out := make(map[string]any, len(b.fields)+2)
	for k, v := range b.fields {
		out[k] = v
	}
	out["messages"] = []any{b.last}
	if b.count > 1 {
		out["history"] = b.hist.History()
	} else {
		delete(out, "history")
	}
	body, err := json.Marshal(out)
	if err != nil {
		return chatRequest{}, nil, apierror.New(apierror.BadRequest, "%s has a value that is not valid for this request", br.subject).WithCause(fmt.Errorf("%w: %w", ErrBadRequest, err))
	}
	if int64(len(body)) > limit+historyRoom {
		return chatRequest{}, nil, apierror.New(apierror.TooLarge, "the new message and the other fields of the request are %d bytes; the limit is %d bytes (the earlier messages do not count)", len(body), limit)
	}
	last, _ := json.Marshal(b.last)
	return chatRequest{ID: id, Messages: []json.RawMessage{last}}, body, nil
}

// historyRoom is what the re-encoded body may take past the limit: the
// history summary and the escaping json.Marshal adds.
const historyRoom = 4 << 10

func kindOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "null"
}

func (br *bodyReader) read() (*chatBody, error) {
	tok, err := br.token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if _, err := br.value(tok); err != nil {
			return nil, err
		}
		return nil, badRequest("%s must be a JSON object {\"id\", \"messages\", ...}", br.subject)
	}
	b := &chatBody{fields: map[string]any{}}
	for br.dec.More() {
		tok, err := br.token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if key == "messages" {
			if err := br.messages(b); err != nil {
				return nil, err
			}
			continue
		}
		tok, err = br.token()
		if err != nil {
			return nil, err
		}
		v, err := br.value(tok)
		if err != nil {
			return nil, err
		}
		br.charge(int64(len(key)) + 4)
		b.fields[key] = v
	}
	if _, err := br.token(); err != nil { // '}'
		return nil, err
	}
	if _, err := br.dec.Token(); err != io.EOF {
		if err == nil || !isReadError(err) {
			return nil, badRequest("%s must be one JSON value; more follows at byte %d", br.subject, br.dec.InputOffset())
		}
		return nil, br.fail(err)
	}
	return b, nil
}

// messages reads the messages array: each element is kept until the next
// one starts, and summed up in b.hist once it is not the last.
func (br *bodyReader) messages(b *chatBody) error {
	// A "messages" given again replaces the first: its charge is refunded.
	br.left += b.lastCost
	b.lastCost = 0
	br.over = br.left < 0
	left := br.left
	tok, err := br.token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		v, err := br.value(tok)
		if err != nil {
			return err
		}
		// An error unless a later "messages" key replaces it, as
		// encoding/json reads a key given twice.
		*b = chatBody{fields: b.fields, notArray: kindOf(v)}
		br.left, br.over = left, left < 0
		return nil
	}
	// A second "messages" key replaces the first, as encoding/json reads it.
	*b = chatBody{fields: b.fields}
	var prev message
	for br.dec.More() {
		if b.count > 0 {
			b.hist.Add(prev.id, prev.role, prev.texts)
		}
		tok, err := br.token()
		if err != nil {
			return err
		}
		var m message
		v, err := br.message(tok, &m)
		if err != nil {
			return err
		}
		b.count++
		b.last, b.lastOver, prev = v, br.over, m
		br.left, br.over = left, left < 0 // each message gets the whole budget in turn
	}
	_, err = br.token() // ']'
	if b.count > 0 && !b.lastOver {
		last, _ := json.Marshal(b.last)
		b.lastCost = int64(len(last))
		br.charge(b.lastCost)
	}
	return err
}

// message is what the summary of an earlier message needs.
type message struct {
	id, role string
	texts    []string
}

// message reads one element of messages, keeping its id, role and the
// texts of its text parts in m, and returns it whole unless it went over
// the limit.
func (br *bodyReader) message(tok json.Token, m *message) (any, error) {
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return br.value(tok)
	}
	obj := map[string]any{}
	for br.dec.More() {
		tok, err := br.token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		br.charge(int64(len(key)) + 4)
		if tok, err = br.token(); err != nil {
			return nil, err
		}
		var v any
		switch key {
		case "parts":
			v, err = br.parts(tok, m)
		default:
			v, err = br.value(tok)
			s, _ := v.(string)
			switch key {
			case "id":
				m.id = s
			case "role":
				m.role = s
			}
		}
		if err != nil {
			return nil, err
		}
		if !br.over {
			obj[key] = v
		}
	}
	if _, err := br.token(); err != nil {
		return nil, err
	}
	if br.over {
		return nil, nil
	}
	return obj, nil
}

// parts reads a message's parts, keeping the text of its text parts,
// which it reads whole even past the limit (one string at a time).
func (br *bodyReader) parts(tok json.Token, m *message) (any, error) {
	m.texts = m.texts[:0]
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return br.value(tok)
	}
	arr := []any{}
	for br.dec.More() {
		tok, err := br.token()
		if err != nil {
			return nil, err
		}
		if d, ok := tok.(json.Delim); !ok || d != '{' {
			v, err := br.value(tok)
			if err != nil {
				return nil, err
			}
			if !br.over {
				arr = append(arr, v)
			}
			continue
		}
		p := map[string]any{}
		var typ, text string
		for br.dec.More() {
			k, err := br.token()
			if err != nil {
				return nil, err
			}
			key, _ := k.(string)
			br.charge(int64(len(key)) + 4)
			vt, err := br.token()
			if err != nil {
				return nil, err
			}
			v, err := br.value(vt)
			if err != nil {
				return nil, err
			}
			switch key {
			case "type":
				typ, _ = v.(string)
			case "text":
				text, _ = v.(string)
			}
			if !br.over {
				p[key] = v
			}
		}
		if _, err := br.token(); err != nil {
			return nil, err
		}
		if typ == "text" {
			m.texts = append(m.texts, text)
		}
		if !br.over {
			arr = append(arr, p)
		}
	}
	if _, err := br.token(); err != nil {
		return nil, err
	}
	return arr, nil
}

// value reads the rest of the value tok starts, as encoding/json decodes
// it into an any (numbers as json.Number). Each string and number is
// charged to the budget; past it, br.over is set and what is read is still
// returned so that the caller can read the fields it needs (one part at a
// time, so no more than one part is held past the limit).
func (br *bodyReader) value(tok json.Token) (any, error) {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for br.dec.More() {
				k, err := br.token()
				if err != nil {
					return nil, err
				}
				key, _ := k.(string)
				br.charge(int64(len(key)) + 4)
				vt, err := br.token()
				if err != nil {
					return nil, err
				}
				v, err := br.value(vt)
				if err != nil {
					return nil, err
				}
				if !br.over {
					obj[key] = v
				}
			}
			_, err := br.token()
			return obj, err
		case '[':
			arr := []any{}
			for br.dec.More() {
				vt, err := br.token()
				if err != nil {
					return nil, err
				}
				v, err := br.value(vt)
				if err != nil {
					return nil, err
				}
				if !br.over {
					arr = append(arr, v)
				}
			}
			_, err := br.token()
			return arr, err
		}
		return nil, badRequest("%s is not valid JSON (at byte %d)", br.subject, br.dec.InputOffset())
	case string:
		br.charge(int64(len(t)) + 2)
	case json.Number:
		br.charge(int64(len(t)))
	default:
		br.charge(5)
	}
	return tok, nil
}

func (br *bodyReader) charge(n int64) {
	br.left -= n
	if br.left < 0 {
		br.over = true
	}
}

func (br *bodyReader) token() (json.Token, error) {
	tok, err := br.dec.Token()
	if err != nil {
		return nil, br.fail(err)
	}
	return tok, nil
}

// isReadError reports whether err came from reading the body rather than
// from its JSON.
func isReadError(err error) bool {
	var se *json.SyntaxError
	return !errors.As(err, &se) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF)
}

// fail translates an error of the token stream.
func (br *bodyReader) fail(err error) error {
	var mbe *http.MaxBytesError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &mbe):
		return apierror.OverLimit(-1, mbe.Limit).WithCause(err)
	case errors.As(err, &se):
		return apierror.New(apierror.BadRequest, "%s is not valid JSON (at byte %d)", br.subject, se.Offset).WithCause(fmt.Errorf("%w: %w", ErrBadRequest, err))
	case errors.Is(err, io.EOF) && br.dec.InputOffset() == 0:
		return apierror.New(apierror.BadRequest, "%s is empty; it must be a JSON object {\"id\", \"messages\", ...}", br.subject).WithCause(fmt.Errorf("%w: %w", ErrBadRequest, err))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return apierror.New(apierror.BadRequest, "%s is not valid JSON: it ends early, at byte %d", br.subject, br.dec.InputOffset()).WithCause(fmt.Errorf("%w: %w", ErrBadRequest, err))
	}
	return apierror.New(apierror.BadRequest, "the request body could not be read to its end").WithCause(fmt.Errorf("%w: %w", ErrBadRequest, err))
}
