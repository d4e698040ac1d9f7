package llm

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// localToolPrefix starts a line of a user message that makes the local
// model call a tool: "/tool <name> <arguments>"; localAgentPrefix the short
// form of a call of the agent tool: "/agent <child id> <text>". A line
// that starts with localJoin ("+/tool ...", "+/agent ...") is called in
// the same step as the line before it.
const (
	localToolPrefix  = "/tool"
	localAgentPrefix = "/agent"
	localJoin        = "+"
	// LocalAgentTool is the tool the short form "/agent <child id> <text>"
	// calls, with input {"agent": "<child id>", "text": "<text>"}.
	LocalAgentTool = "agent"
)

// localToolLine is one "/tool <name> <arguments>" or "/agent <id> <text>"
// line of a prompt.
type localToolLine struct {
	name string
	args string // raw, as written; "{}" when missing
	// join: the line is called in the same step as the one before it.
	join bool
}

// localToolLines parses the /tool and /agent lines of prompt, in order.
// The arguments of /tool are the rest of the line after the name, trimmed,
// and are not checked: the model passes invalid JSON through as written.
func localToolLines(prompt string) []localToolLine {
	var out []localToolLine
	for _, line := range strings.Split(prompt, "\n") {
		line = strings.TrimSpace(line)
		line, join := strings.CutPrefix(line, localJoin)
		line = strings.TrimSpace(line)
		join = join && len(out) > 0
		if rest, ok := cutCommand(line, localAgentPrefix); ok {
			id, text := rest, ""
			if i := strings.IndexFunc(rest, unicode.IsSpace); i >= 0 {
				id, text = rest[:i], strings.TrimSpace(rest[i:])
			}
			args, _ := json.Marshal(map[string]string{"agent": id, "text": text})
			out = append(out, localToolLine{name: LocalAgentTool, args: string(args), join: join})
			continue
		}
		rest, ok := cutCommand(line, localToolPrefix)
		if !ok {
			continue
		}
		name, args := rest, ""
		if i := strings.IndexFunc(rest, unicode.IsSpace); i >= 0 {
			name, args = rest[:i], strings.TrimSpace(rest[i:])
		}
		if args == "" {
			args = "{}"
		}
		out = append(out, localToolLine{name: name, args: args, join: join})
	}
	return out
}

// cutCommand returns what follows the command cmd at the start of line,
// trimmed: "/tool x" is the command "/tool" with "x", "/toolbox" and a
// bare "/tool" are not.
func cutCommand(line, cmd string) (string, bool) {
	rest, ok := strings.CutPrefix(line, cmd)
	if !ok || rest == "" || !unicode.IsSpace(rune(rest[0])) {
		return "", false
	}
	return strings.TrimLeftFunc(rest, unicode.IsSpace), true
}

// localStep is what the local model does for one request: call tools, or
// answer with text.
type localStep struct {
	prompt string     // the last user message
	step   int        // how many tool results follow the prompt
	lines  int        // how many tool lines the prompt has
	calls  []ToolCall // the tool calls of this step; none for a text answer
	text   string     // the full answer when calls is empty
}

// planLocal decides the local model's step for msgs. Without tool lines in
// the last user message it answers the message (localAnswer). With them,
// it calls the tools of the step holding line k, where k is the number of
// tool results after the message (line k and the lines joined to it), and
// once every line has a result it answers with a sentence per result.
func planLocal(msgs []Message) localStep {
	if isSummaryRequest(msgs) {
		return localStep{prompt: SummarizePrompt, text: LocalSummary(msgs[:len(msgs)-1])}
	}
	ui := lastUserIndex(msgs)
	if ui < 0 {
		return localStep{text: localAnswer("")}
	}
	prompt := msgs[ui].PlainText()
	lines := localToolLines(prompt)
	if len(lines) == 0 {
		return localStep{prompt: prompt, text: localAnswer(prompt)}
	}
	names := map[string]string{} // tool call id -> tool name
	var results []*ToolResult
	for _, m := range msgs[ui+1:] {
		for _, p := range m.Parts {
			if p.ToolCall != nil {
				names[p.ToolCall.ID] = p.ToolCall.Name
			}
			if p.ToolResult != nil {
				results = append(results, p.ToolResult)
			}
		}
	}
	st := localStep{prompt: prompt, step: len(results), lines: len(lines)}
	if k := len(results); k < len(lines) {
		for i := k; i < len(lines) && (i == k || lines[i].join); i++ {
			st.calls = append(st.calls, ToolCall{ID: localCallID(prompt, i), Name: lines[i].name, Input: json.RawMessage(lines[i].args)})
		}
		return st
	}
	sentences := make([]string, len(results))
	for i, r := range results {
		name, ok := names[r.CallID]
		if !ok && i < len(lines) {
			name = lines[i].name // a result whose call is not in the history
		}
		verb := "returned"
		if r.IsError {
			verb = "failed"
		}
		if agent, text, ok := subagentAnswer(r); ok {
			sentences[i] = fmt.Sprintf("The %s tool returned the answer of %s: %s", name, agent, quoteAnswer(text))
			continue
		}
		sentences[i] = fmt.Sprintf("The %s tool %s: %s.", name, verb, quoteOutput(r.Output))
	}
	st.text = strings.Join(sentences, " ")
	return st
}

// responseID is the ResponseID the local model reports for the step: a hash
// of the prompt, and of the step when the prompt calls tools, so each step
// is its own response.
func (st localStep) responseID() string {
	h := fnv.New64a()
	h.Write([]byte(st.prompt))
	if st.lines > 0 {
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(st.step)))
	}
	return fmt.Sprintf("local-%016x", h.Sum64())
}

// localCallID is the id of the tool call the local model makes for line k
// of prompt: "call_" and the hex FNV-64a hash of the prompt, a zero byte
// and k in decimal.
func localCallID(prompt string, k int) string {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(k)))
	return fmt.Sprintf("call_%016x", h.Sum64())
}

// localArgRunes is the size of a streamed tool input fragment, in runes:
// about one token of a BPE tokenizer.
const localArgRunes = 4

// argPieces splits tool input into the fragments the local model streams:
// localArgRunes runes each, and at least two when s has two runes or more.
// The pieces concatenate to s.
func argPieces(s string) []string {
	n := utf8.RuneCountInString(s)
	size := localArgRunes
	if n <= localArgRunes {
		size = (n + 1) / 2
	}
	if size == 0 {
		return nil
	}
	var out []string
	for len(s) > 0 {
		end, count := 0, 0
		for end < len(s) && count < size {
			_, w := utf8.DecodeRuneInString(s[end:])
			end += w
			count++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}

// localInputTokens approximates the input tokens of req: the words of the
// system prompt, of the text of every message and of every tool output.
func localInputTokens(req Request) int64 {
	n := countWords(req.System)
	for _, m := range req.Messages {
		n += countWords(m.PlainText())
		for _, p := range m.Parts {
			if p.ToolResult != nil {
				n += countWords(p.ToolResult.Output)
			}
		}
	}
	return n
}

// subagentAnswer returns the child agent and its final text when r is the
// result of a sub-agent call that completed (chat's ChildOutput: a JSON
// object with "agent" and "text").
func subagentAnswer(r *ToolResult) (agent, text string, ok bool) {
	if r.IsError || !strings.HasPrefix(strings.TrimSpace(r.Output), "{") {
		return "", "", false
	}
	var o struct {
		Agent string  `json:"agent"`
		Text  *string `json:"text"`
	}
	if json.Unmarshal([]byte(r.Output), &o) != nil || o.Agent == "" || o.Text == nil {
		return "", "", false
	}
	return o.Agent, strings.TrimSpace(*o.Text), true
}

// maxQuote bounds how much of a sub-agent's answer the local model quotes:
// the whole answer is the tool's output, which a client already shows.
const maxQuote = 240

// quoteAnswer quotes a sub-agent's answer as a sentence a person reads: the
// text itself (not its JSON encoding), whole when short, else its
// beginning up to the end of a sentence (or a word) and how long it is.
func quoteAnswer(text string) string {
	if text == "" {
		return "an empty answer."
	}
	if len(text) <= maxQuote {
		return endSentence(text)
	}
	n := maxQuote
	for n > 0 && !utf8.RuneStart(text[n]) {
		n-- // not inside a character
	}
	cut := text[:n]
	if i := strings.LastIndexAny(cut, ".!?"); i >= maxQuote/4 {
		cut = cut[:i+1]
	} else if i := strings.LastIndexAny(cut, " \n"); i > 0 {
		cut = cut[:i] + "…"
	} else {
		cut += "…"
	}
	return fmt.Sprintf("%s (the beginning of %d words; the whole answer is the tool's output).", strings.TrimSpace(cut), len(strings.Fields(text)))
}

// endSentence ends s with a full stop unless it ends with punctuation.
func endSentence(s string) string {
	if r, _ := utf8.DecodeLastRuneInString(s); strings.ContainsRune(".!?…", r) {
		return s
	}
	return s + "."
}

// maxQuoteOutput bounds the tool output the local model quotes whole: a
// longer one (a large payload) is quoted by its size, its SHA-256 and its
// beginning, so the answer shows the model read all of it without
// streaming it back.
const maxQuoteOutput = 16 << 10

// quoteOutput is a tool output as the local model's answer quotes it.
func quoteOutput(out string) string {
	if len(out) <= maxQuoteOutput {
		return out
	}
	n := maxQuote
	for n > 0 && !utf8.RuneStart(out[n]) {
		n--
	}
	return fmt.Sprintf("%d bytes of sha256 %x, beginning %s…", len(out), sha256.Sum256([]byte(out)), out[:n])
}
