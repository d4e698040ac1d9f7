package chat

import (
	"strconv"
	"testing"
)

func TestPlanContext(t *testing.T) {
	// n messages of 10 tokens each, user and assistant in turn from m0
	// (user).
	conv := func(n int) ([]Message, []int) {
		var msgs []Message
		var tokens []int
		for i := range n {
			role := RoleUser
			if i%2 == 1 {
				role = RoleAssistant
			}
			msgs = append(msgs, Message{ID: "m" + strconv.Itoa(i), Role: role})
			tokens = append(tokens, 10)
		}
		return msgs, tokens
	}
	cases := []struct {
		name   string
		n      int
		budget int
		system int
		upto   string
		want   contextPlan
	}{
		{name: "no budget", n: 7, budget: 0, want: contextPlan{whole: true}},
		{name: "no messages", n: 0, budget: 10, system: 20, want: contextPlan{whole: true}},
		{name: "one message over the budget", n: 1, budget: 5, want: contextPlan{}},
		{name: "fits", n: 7, budget: 75, system: 5, want: contextPlan{whole: true}},
		{name: "just over: a summary of all but the newest quarter", n: 7, budget: 70, system: 5, want: contextPlan{cut: 6}},
		{name: "a larger budget keeps more", n: 13, budget: 120, want: contextPlan{cut: 10}},
		{name: "the stored summary is reused", n: 9, budget: 80, upto: "m5", want: contextPlan{covered: 6}},
		{name: "past half the budget after it, a new one", n: 11, budget: 80, upto: "m3", want: contextPlan{covered: 4, cut: 10}},
		{name: "a summary of truncated messages is not used", n: 9, budget: 80, upto: "gone", want: contextPlan{cut: 8}},
		{name: "nothing new to summarise", n: 7, budget: 20, upto: "m5", want: contextPlan{covered: 6}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msgs, tokens := conv(tc.n)
			if got := planContext(tc.budget, tc.system, tokens, msgs, tc.upto); got != tc.want {
				t.Errorf("plan = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFitFrom(t *testing.T) {
	msgs := []Message{{Role: RoleUser}, {Role: RoleAssistant}, {Role: RoleUser}, {Role: RoleAssistant}, {Role: RoleUser}}
	tokens := []int{10, 10, 10, 10, 10}
	cases := []struct {
		name         string
		budget, used int
		start, want  int
	}{
		{name: "all fit", budget: 100, used: 10, start: 0, want: 0},
		{name: "from start", budget: 100, used: 10, start: 2, want: 2},
		{name: "the newest that fit, from a user message", budget: 40, used: 10, start: 0, want: 2},
		{name: "at least the last", budget: 5, used: 10, start: 0, want: 4},
		{name: "nothing after start", budget: 100, start: 5, want: 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := fitFrom(tc.budget, tc.used, tokens, msgs, tc.start); got != tc.want {
				t.Errorf("fitFrom = %d, want %d", got, tc.want)
			}
		})
	}
}
