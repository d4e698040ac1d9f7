package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/forever-agents/forever/agentd/agentdtest"
)

// browser starts headless Chromium for one test and returns the context
// that drives it, bounded to 90 s; the test's end stops it.
func browser(t *testing.T, chromium string) context.Context {
	profile := browserProfile(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelT(); cancel(); cancelAlloc() })
	return ctx
}

// browserProfile makes Chromium's profile directory. It is not
// t.TempDir: Chromium's helper processes may still write to the profile
// for a moment after the browser is stopped, and t.TempDir fails the
// test when its directory is not empty at removal. The profile is
// removed with retries, and a leftover is only logged.
func browserProfile(t *testing.T) string {
	dir, err := os.MkdirTemp("", "forever-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; ; i++ {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if i == 20 {
				t.Logf("chromium profile %s left behind: %v", dir, err)
				return
			}
			time.Sleep(100 * time.Millisecond) // not a synchronisation: a retry's backoff (chromium still writing its profile)
		}
	})
	return dir
}

// chromiumPath finds Debian's chromium (installed by .ci/run).
func chromiumPath(t *testing.T) string {
	for _, p := range []string{os.Getenv("FOREVER_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not found: .ci/run installs Debian's chromium package")
	}
	t.Skip("chromium not installed (apt-get install chromium)")
	return ""
}

// testBinaryBrowserReload: in headless Chromium the chat page sends a
// message, the page is reloaded mid-turn, and the full reply is shown once.
// On the same daemon and browser, Stop ends a turn and a closed tab does
// not (testBrowserStop, testBrowserCloseTab).
func testBinaryBrowserReload(t *testing.T, bin string) {
	chromium := chromiumPath(t)
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := &agentdProc{out: &agentdtest.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd = exec.Command(bin, "--data", data, "--http", httpAddr, "--nats-listen", natsAddr, "--local-rate", "40")
	p.cmd.Env = os.Environ()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p = startWith(t, p, httpAddr)

	ctx := browser(t, chromium)

	const chatID = "browser1"
	url := "http://" + httpAddr + "/?chat=" + chatID
	assistant := `.msg[data-role=assistant]`
	var partial string
	err := chromedp.Run(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(`#input`, chromedp.ByQuery),
		chromedp.SendKeys(`#input`, storyPrompt, chromedp.ByQuery),
		chromedp.Click(`#send`, chromedp.ByQuery),
		chromedp.WaitVisible(assistant+`[data-status=streaming]`, chromedp.ByQuery),
		chromedp.Poll(`(document.querySelector('.msg[data-role=assistant]')?.textContent || '').length > 80`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text(assistant, &partial, chromedp.ByQuery),
		// Reload mid-turn: the page resumes the stream.
		chromedp.Reload(),
		chromedp.WaitVisible(`#input`, chromedp.ByQuery),
		chromedp.WaitVisible(assistant+`[data-status=done]`, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("browser: %v\nagentd output:\n%s", err, p.out.String())
	}
	var n int
	var shown string
	if err := chromedp.Run(ctx,
		chromedp.Evaluate(`document.querySelectorAll('.msg[data-role=assistant]').length`, &n),
		chromedp.Text(assistant, &shown, chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	// The page is done at the finish chunk; the turn stores the assistant
	// message just after it, so wait for the stored reply to appear.
	want := storedReply(t, httpAddr, chatID)
	if n != 1 {
		t.Errorf("%d assistant messages shown, want 1", n)
	}
	if strings.TrimSpace(shown) != strings.TrimSpace(want) {
		t.Errorf("page shows %q\nwant the full reply once: %q", shown, want)
	}
	if len(partial) >= len(want) {
		t.Errorf("the reload did not happen mid-turn (%d of %d bytes shown before it)", len(partial), len(want))
	}
	t.Logf("reloaded after %d of %d bytes", len(partial), len(want))

	t.Run("Stop", func(t *testing.T) { testBrowserStop(t, ctx, dialAgentd(t, natsAddr), httpAddr, len(want)) })
	t.Run("CloseTab", func(t *testing.T) { testBrowserCloseTab(t, ctx, dialAgentd(t, natsAddr), httpAddr, len(want)) })
}

// assistantText is the stored assistant reply of a chat.
func assistantText(t *testing.T, httpAddr, chatID string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/v1/chat/" + chatID + "/messages")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Messages []struct {
			Role  string
			Parts []struct{ Type, Text string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, m := range page.Messages {
		if m.Role != "assistant" {
			continue
		}
		for _, p := range m.Parts {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// testBinaryBrowserAuth: with --auth the chat page loads without a token
// (it holds no data), asks for the tenant's API token when the API answers
// 401, keeps it in the tab, and chats with it; a wrong token is refused
// and asked for again.
func testBinaryBrowserAuth(t *testing.T, bin string) {
	chromium := chromiumPath(t)
	data := filepath.Join(t.TempDir(), "data")
	httpAddr, natsAddr := agentdtest.FreeAddr(t), agentdtest.FreeAddr(t)
	p := startAgentd(t, bin, data, httpAddr, natsAddr, "--auth", "--local-rate", "-1")
	tc := createTenant(t, bin, "nats://"+natsAddr, filepath.Join(data, "admin.creds"), t.TempDir(), "acme")

	ctx := browser(t, chromium)
	url := "http://" + httpAddr + "/?chat=authed"
	var shown, asked string
	err := chromedp.Run(ctx,
		chromedp.Navigate(url),
		// The page loads, reads the history, gets 401 and asks.
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, "fvr_wrong", chromedp.ByQuery),
		chromedp.Click(`#token-use`, chromedp.ByQuery),
		chromedp.Poll(`(document.getElementById('auth-error').textContent || '').includes('refused')`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text(`#auth-error`, &asked, chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById('token').value = ''`, nil),
		chromedp.SendKeys(`#token`, tc.Token, chromedp.ByQuery),
		chromedp.Click(`#token-use`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#auth`, chromedp.ByQuery),
		chromedp.SendKeys(`#input`, "hello with a token", chromedp.ByQuery),
		chromedp.Click(`#send`, chromedp.ByQuery),
		chromedp.WaitVisible(`.msg[data-role=assistant][data-status=done]`, chromedp.ByQuery),
		chromedp.Text(`.msg[data-role=assistant]`, &shown, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("browser: %v\nagentd output:\n%s", err, p.out.String())
	}
	if !strings.Contains(shown, "hello with a token") {
		t.Errorf("the page shows %q, want the reply quoting the message", shown)
	}
	if code, _ := authedGet(t, "http://"+httpAddr+"/v1/chat/authed/messages", ""); code != http.StatusUnauthorized {
		t.Errorf("the API without a token: %d, want 401", code)
	}
}
