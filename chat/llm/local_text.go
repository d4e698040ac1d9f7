package llm

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"unicode"
)

// localAnswer returns the deterministic answer of the local model to the
// prompt (the last user message). The same prompt always gives the same
// text; a prompt mentioning "story" gets a story of a few hundred words.
func localAnswer(prompt string) string {
	if strings.Contains(strings.ToLower(prompt), "story") {
		return localStory(prompt)
	}
	return localReply(prompt)
}

func localSeed(prompt string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	s := h.Sum64()
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

// localReply is a short answer (about 20 to 40 words) addressing prompt.
func localReply(prompt string) string {
	words := strings.Fields(prompt)
	if len(words) == 0 {
		return "Hello! I am the local model. I answer every message deterministically, without a network. Ask me for a story to see a longer streamed answer."
	}
	const maxEcho = 12
	echo := strings.Join(words[:min(len(words), maxEcho)], " ")
	if len(words) > maxEcho {
		echo += " ..."
	}
	r := localSeed(prompt)
	openers := []string{"Thanks for your message.", "Good question.", "Noted.", "I hear you."}
	closers := []string{
		"This answer comes from the built-in local model, so it is the same every time you ask.",
		"I am the built-in local model: no network, same answer for the same words.",
		"Ask me for a story if you want a longer answer streamed token by token.",
	}
	return fmt.Sprintf("%s You said: %q. %s", openers[r.IntN(len(openers))], echo, closers[r.IntN(len(closers))])
}

var (
	storyHeroes  = []string{"the lighthouse keeper", "a young cartographer", "the old baker", "a curious fox", "the night-shift engineer", "a retired sailor"}
	storyPlaces  = []string{"the harbour", "the northern ridge", "the market square", "the flooded library", "the lighthouse stairs", "the orchard behind the mill"}
	storyThings  = []string{"a brass compass", "a letter without a stamp", "a lantern that never dimmed", "a map drawn in pencil", "a key made of driftwood", "a jar of sea glass"}
	storyVerbs   = []string{"found", "carried", "hid", "mended", "followed", "remembered"}
	storyMoods   = []string{"quietly", "with great care", "before dawn", "in the rain", "against the wind", "without a word"}
	storyLinkers = []string{"Later,", "Meanwhile,", "By evening,", "Not long after,", "That winter,", "In the end,"}
)

// localStory is a story of roughly 220 to 320 words seeded by prompt.
func localStory(prompt string) string {
	r := localSeed(prompt)
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	var b strings.Builder
	fmt.Fprintf(&b, "Here is a story about %s.\n\n", storyTopic(prompt))
	target := 220 + r.IntN(100)
	words, sentences := 0, 0
	for words < target {
		var s string
		switch r.IntN(4) {
		case 0:
			s = fmt.Sprintf("%s %s %s %s near %s.", pick(storyLinkers), pick(storyHeroes), pick(storyVerbs), pick(storyThings), pick(storyPlaces))
		case 1:
			s = fmt.Sprintf("Nobody in %s knew why %s had %s %s %s.", pick(storyPlaces), pick(storyHeroes), pick(storyVerbs), pick(storyThings), pick(storyMoods))
		case 2:
			s = fmt.Sprintf("%s walked to %s %s, thinking about %s.", capitalize(pick(storyHeroes)), pick(storyPlaces), pick(storyMoods), pick(storyThings))
		default:
			s = fmt.Sprintf("The wind over %s smelled of salt, and %s %s it %s.", pick(storyPlaces), pick(storyHeroes), pick(storyVerbs), pick(storyMoods))
		}
		if sentences > 0 {
			if sentences%5 == 0 {
				b.WriteString("\n\n")
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(s)
		words += len(strings.Fields(s))
		sentences++
	}
	b.WriteString("\n\nThe end.")
	return b.String()
}

// storyTopic is the few words after "about" in prompt, or a default.
func storyTopic(prompt string) string {
	lower := strings.ToLower(prompt)
	i := strings.Index(lower, " about ")
	if i < 0 {
		return "a quiet harbour town"
	}
	words := strings.Fields(prompt[i+len(" about "):])
	words = words[:min(len(words), 6)]
	topic := strings.TrimRightFunc(strings.Join(words, " "), func(r rune) bool { return unicode.IsPunct(r) })
	if topic == "" {
		return "a quiet harbour town"
	}
	return topic
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// tokenEnds returns the end offsets of the tokens of s: a token is a run of
// non-space characters followed by the spaces after it, so the tokens
// concatenate to s. Leading spaces belong to the first token.
func tokenEnds(s string) []int {
	var ends []int
	inSpace := true // treat leading spaces as part of the first token
	seenWord := false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if !space && inSpace && seenWord {
			ends = append(ends, i)
		}
		if !space {
			seenWord = true
		}
		inSpace = space
	}
	if len(s) > 0 {
		ends = append(ends, len(s))
	}
	return ends
}

// countWords approximates a token count.
func countWords(s string) int64 { return int64(len(strings.Fields(s))) }
