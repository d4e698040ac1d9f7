package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/forever-agents/forever/agentd/agentdtest"
	"github.com/forever-agents/forever/agentd/demo"
)

// testBinaryBrowserTools: in headless Chromium the chat page shows the
// built-in tools' calls inside the assistant message. A clock call reaches
// output-available and the answer quotes it. A note needing approval shows
// Approve and Deny, which survive a reload; Approve runs the note once and
// the resumed turn is appended to the same message. Deny on a second note
// shows it denied and writes nothing.
func testBinaryBrowserTools(t *testing.T, bin string) {
	chromium := chromiumPath(t)
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--local-rate", "200")
	ctx := browser(t, chromium)

	run := func(step string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v\nagentd output:\n%s", step, err, p.out.String())
		}
	}
	// poll waits for a JavaScript expression to be true.
	poll := func(expr string) chromedp.Action {
		return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(30*time.Second))
	}
	// idle: the page is not streaming (load and every turn are over).
	idle := poll(`document.body.dataset.state === 'idle'`)
	say := func(text string) chromedp.Action {
		return chromedp.Tasks{
			chromedp.SendKeys(`#input`, text, chromedp.ByQuery),
			chromedp.Click(`#send`, chromedp.ByQuery),
		}
	}
	const (
		assistant = `.msg[data-role=assistant]`
		clock     = `.tool[data-tool-name=clock]`
		note      = `.tool[data-tool-name=note]`
	)

	const chatID = "browsertools"
	run("the clock call",
		chromedp.Navigate("http://"+httpAddr+"/?chat="+chatID),
		chromedp.WaitVisible(`#input`, chromedp.ByQuery),
		idle,
		say(`/tool clock {}`),
		chromedp.WaitVisible(clock+`[data-tool-state=output-available]`, chromedp.ByQuery),
		poll(`[...document.querySelectorAll('`+assistant+`')].some((e) => e.dataset.status === 'done' && e.textContent.includes('The clock tool returned: {'))`),
		idle,
	)
	var clockOut string
	run("the clock output", chromedp.Text(clock+` .tool-output`, &clockOut, chromedp.ByQuery))
	if !strings.Contains(clockOut, `"unix"`) {
		t.Errorf("clock output shown as %q", clockOut)
	}

	approve := note + `[data-tool-state=approval-requested] button[data-action=approve]`
	run("the note call waiting for approval",
		say(`/tool note {"text":"please approve"}`),
		chromedp.WaitVisible(approve, chromedp.ByQuery),
		chromedp.WaitVisible(note+` button[data-action=deny]`, chromedp.ByQuery),
		idle,
		// The buttons come back from the stored messages.
		chromedp.Reload(),
		chromedp.WaitVisible(`#input`, chromedp.ByQuery),
		idle,
		chromedp.WaitVisible(approve, chromedp.ByQuery),
		chromedp.Click(approve, chromedp.ByQuery),
		chromedp.WaitVisible(note+`[data-tool-state=output-available]`, chromedp.ByQuery),
		poll(`[...document.querySelectorAll('`+assistant+`')].some((e) => e.dataset.status === 'done' && e.textContent.includes('The note tool returned: {'))`),
		idle,
	)
	var buttons, bubbles int
	var same bool
	run("the page after the approval",
		chromedp.Evaluate(`document.querySelectorAll('button[data-action]').length`, &buttons),
		chromedp.Evaluate(`document.querySelectorAll('`+assistant+`').length`, &bubbles),
		// The resumed turn went on in the note's message.
		chromedp.Evaluate(`(() => { const n = document.querySelector('`+note+`'); const m = n && n.closest('.msg');
			return !!m && m.textContent.includes('The note tool returned: {'); })()`, &same),
	)
	if buttons != 0 {
		t.Errorf("%d approval buttons left after the approval", buttons)
	}
	if bubbles != 2 {
		t.Errorf("%d assistant messages shown, want 2", bubbles)
	}
	if !same {
		t.Error("the approved note's answer is not in the note's message")
	}
	notes, _ := os.ReadFile(filepath.Join(data, demo.NotesFile))
	if got := strings.Count(string(notes), "\n"); got != 1 {
		t.Errorf("notes.txt has %d lines, want 1:\n%s", got, notes)
	}

	// Deny a second note: it shows denied, and nothing is written.
	deny := `.msg:last-child ` + note + `[data-tool-state=approval-requested] button[data-action=deny]`
	run("the denied note",
		say(`/tool note {"text":"approve this too"}`),
		chromedp.WaitVisible(deny, chromedp.ByQuery),
		idle,
		chromedp.Click(deny, chromedp.ByQuery),
		chromedp.WaitVisible(`.msg:last-child `+note+`[data-tool-state=output-denied] .tool-denied`, chromedp.ByQuery),
		idle,
	)
	run("the page after the denial",
		chromedp.Evaluate(`document.querySelectorAll('button[data-action]').length`, &buttons),
		chromedp.Evaluate(`document.querySelectorAll('`+assistant+`').length`, &bubbles),
	)
	if buttons != 0 || bubbles != 3 {
		t.Errorf("after the denial: %d buttons, %d assistant messages; want 0 and 3", buttons, bubbles)
	}
	notes, _ = os.ReadFile(filepath.Join(data, demo.NotesFile))
	if got := strings.Count(string(notes), "\n"); got != 1 {
		t.Errorf("notes.txt has %d lines after the denial, want 1:\n%s", got, notes)
	}
	if t.Failed() {
		t.Logf("agentd output:\n%s", p.out.String())
	}
}
