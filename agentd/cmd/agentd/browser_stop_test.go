package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/forever-agents/forever/chat/chunk"
	"github.com/forever-agents/forever/internal/waitfor"
)

// storyPrompt is the message of the chat page tests whose answer is long
// enough (at --local-rate 40) to act in the middle of it.
const storyPrompt = "Tell me a story about a lighthouse."

// testBrowserStop: on the daemon of testBinaryBrowserReload (--local-rate
// 40), whose full answer to storyPrompt is full bytes long, the chat
// page's Stop ends the turn: its stream gets one terminal chunk (abort),
// and the partial answer the page shows is the stored assistant message.
func testBrowserStop(t *testing.T, ctx context.Context, c *crashClient, httpAddr string, full int) {
	tab, closeTab := chromedp.NewContext(ctx)
	defer closeTab()
	const chatID = "browser-stop"
	assistant := `.msg[data-role=assistant]`
	var shown string
	err := chromedp.Run(tab,
		chromedp.Navigate("http://"+httpAddr+"/?chat="+chatID),
		chromedp.WaitVisible(`#input`, chromedp.ByQuery),
		chromedp.SendKeys(`#input`, storyPrompt, chromedp.ByQuery),
		chromedp.Click(`#send`, chromedp.ByQuery),
		chromedp.Poll(`(document.querySelector('.msg[data-role=assistant]')?.textContent || '').length > 40`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Click(`#stop`, chromedp.ByQuery),
		chromedp.WaitVisible(assistant+`[data-status=aborted]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#send:not([disabled])`, chromedp.ByQuery),
		chromedp.Text(assistant, &shown, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	chunks := onlyStreamEnd(t, c, chatID)
	if got := terminals(chunks); len(got) != 1 || got[0] != chunk.Abort {
		t.Errorf("the stopped stream's terminal chunks are %v, want one %s", got, chunk.Abort)
	}
	stored := storedReply(t, httpAddr, chatID)
	if strings.TrimSpace(shown) != strings.TrimSpace(stored) {
		t.Errorf("the page shows %q\nthe stored partial answer is %q", shown, stored)
	}
	if stored == "" || len(stored) >= full {
		t.Errorf("stored %d bytes, want the partial answer (less than the full %d)", len(stored), full)
	}
	t.Logf("stopped after %d of %d bytes", len(stored), full)
}

// testBrowserCloseTab: closing the tab mid-answer is a disconnect, not a
// stop: the turn goes on, its stream ends with finish alone, and the full
// answer is stored.
func testBrowserCloseTab(t *testing.T, ctx context.Context, c *crashClient, httpAddr string, full int) {
	tab, closeTab := chromedp.NewContext(ctx)
	defer closeTab()
	const chatID = "browser-close"
	var partial string
	err := chromedp.Run(tab,
		chromedp.Navigate("http://"+httpAddr+"/?chat="+chatID),
		chromedp.WaitVisible(`#input`, chromedp.ByQuery),
		chromedp.SendKeys(`#input`, storyPrompt, chromedp.ByQuery),
		chromedp.Click(`#send`, chromedp.ByQuery),
		chromedp.Poll(`(document.querySelector('.msg[data-role=assistant]')?.textContent || '').length > 40`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text(`.msg[data-role=assistant]`, &partial, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	closeTab() // closes the tab: its fetch of the stream is dropped
	chunks := onlyStreamEnd(t, c, chatID)
	if got := terminals(chunks); len(got) != 1 || got[0] != chunk.Finish {
		t.Errorf("the stream's terminal chunks are %v, want one %s", got, chunk.Finish)
	}
	stored := storedReply(t, httpAddr, chatID)
	if len(stored) != full {
		t.Errorf("stored %d bytes, want the full answer (%d)", len(stored), full)
	}
	if len(partial) >= full {
		t.Errorf("the tab was closed after the answer (%d of %d bytes shown)", len(partial), full)
	}
	t.Logf("tab closed after %d of %d bytes", len(partial), full)
}

// onlyStreamEnd waits for the end of the chat's one stream and returns its
// chunks.
func onlyStreamEnd(t *testing.T, c *crashClient, chatID string) []chunk.Chunk {
	t.Helper()
	var page struct{ Streams []struct{ Stream string } }
	if err := json.Unmarshal(c.command(chatID, "streams", nil), &page); err != nil || len(page.Streams) != 1 {
		t.Fatalf("streams of %s: %+v (%v), want one", chatID, page.Streams, err)
	}
	chunks, ok := streamEnded(c, chatID, page.Streams[0].Stream, 30*time.Second)
	if !ok {
		t.Fatalf("the stream of %s did not end", chatID)
	}
	return chunks
}

// terminals lists the types of the terminal chunks of a stream.
func terminals(chunks []chunk.Chunk) []string {
	var out []string
	for _, ch := range chunks {
		if ch.Terminal() {
			out = append(out, ch.Type)
		}
	}
	return out
}

// storedReply waits for the chat's stored assistant message (stored just
// after its stream's terminal chunk) and returns its text.
func storedReply(t *testing.T, httpAddr, chatID string) string {
	t.Helper()
	var s string
	waitfor.Within(t, 10*time.Second, func() error {
		if s = assistantText(t, httpAddr, chatID); s != "" {
			return nil
		}
		return fmt.Errorf("no stored assistant message in chat %s", chatID)
	})
	return s
}
