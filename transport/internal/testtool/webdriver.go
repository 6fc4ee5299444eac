package testtool

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Browser is one headless Chromium session driven over WebDriver by Debian's chromedriver.
type Browser struct {
	t    testing.TB
	base string // http://127.0.0.1:<port>/session/<id>
}

// elementKey is the W3C WebDriver key of an element reference.
const elementKey = "element-6066-11e4-a52e-4f735466cecf"

var startedOn = regexp.MustCompile(`started successfully on port (\d+)`)

// NewBrowser starts chromedriver and a headless Chromium with a fresh profile, closed when the
// test ends. waits bounds every WaitFor.
func NewBrowser(t testing.TB, width, height int, waits time.Duration) *Browser {
	t.Helper()
	driver := Find(t, "chromedriver")
	chromium := Find(t, "chromium")
	cmd := exec.Command(driver, "--port=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// chromedriver picks a free port and says which once it listens: no polling.
	port := ""
	sc := bufio.NewScanner(out)
	for port == "" && sc.Scan() {
		if m := startedOn.FindStringSubmatch(sc.Text()); m != nil {
			port = m[1]
		}
	}
	if port == "" {
		t.Fatalf("chromedriver did not say its port: %v", sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	b := &Browser{t: t, base: "http://127.0.0.1:" + port}
	var session struct {
		SessionID string `json:"sessionId"`
	}
	b.call(http.MethodPost, "/session", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium, "args": []string{
			// As the machine's own probe runs it: no sandbox as root, and none of Chromium's
			// calls home, which a closed network refuses by the dozen.
			"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--disable-dev-shm-usage", fmt.Sprintf("--window-size=%d,%d", width, height),
		}},
		"goog:loggingPrefs": map[string]string{"browser": "ALL"},
		"timeouts":          map[string]int{"script": int(waits.Milliseconds()), "implicit": 0, "pageLoad": 30_000},
	}}}, &session)
	b.base += "/session/" + session.SessionID
	t.Cleanup(func() { b.call(http.MethodDelete, "", nil, nil) })
	return b
}

// call sends one WebDriver command and decodes its value into out.
func (b *Browser) call(method, path string, body, out any) {
	b.t.Helper()
	if err := b.try(method, path, body, out); err != nil {
		b.t.Fatal(err)
	}
}

func (b *Browser) try(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var reply struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		return fmt.Errorf("webdriver %s %s: %d, undecodable: %v", method, path, resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Message string }
		_ = json.Unmarshal(reply.Value, &e)
		return fmt.Errorf("webdriver %s %s: %s: %s", method, path, e.Error, firstLine(e.Message))
	}
	if out != nil {
		return json.Unmarshal(reply.Value, out)
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Go navigates to url and returns once the page has loaded.
func (b *Browser) Go(url string) {
	b.t.Helper()
	b.call(http.MethodPost, "/url", map[string]string{"url": url}, nil)
}

// Eval runs a JavaScript function body in the page and decodes what it returns into out.
func (b *Browser) Eval(out any, body string) {
	b.t.Helper()
	b.call(http.MethodPost, "/execute/sync", map[string]any{"script": body, "args": []any{}}, out)
}

// WaitFor waits until the JavaScript expression cond is truthy in the page and returns its
// value as a string. The page tells when to look again (a MutationObserver over the whole
// document), so the test never sleeps; it fails after the session's script timeout.
func (b *Browser) WaitFor(what, cond string) string {
	b.t.Helper()
	script := `const done = arguments[arguments.length - 1];
const check = () => { try { return (` + cond + `); } catch (e) { return null; } };
const v = check();
if (v) { done(String(v)); return; }
const o = new MutationObserver(() => { const v = check(); if (v) { o.disconnect(); done(String(v)); } });
o.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });`
	var got string
	if err := b.try(http.MethodPost, "/execute/async", map[string]any{"script": script, "args": []any{}}, &got); err != nil {
		var html string
		_ = b.try(http.MethodPost, "/execute/sync", map[string]any{"script": "return document.getElementById('main').innerText", "args": []any{}}, &html)
		b.t.Fatalf("waiting for %s (%s): %v\n--- the page shows:\n%s", what, cond, err, html)
	}
	return got
}

// element returns the reference of the first element matching a CSS selector.
func (b *Browser) element(css string) string {
	b.t.Helper()
	var ref map[string]string
	b.call(http.MethodPost, "/element", map[string]string{"using": "css selector", "value": css}, &ref)
	return ref[elementKey]
}

// Click clicks the first element matching css, as a user would (WebDriver's element click). A
// page that re-renders may replace the element between finding and clicking it; then it is
// found again.
func (b *Browser) Click(css string) {
	b.t.Helper()
	var err error
	for range 5 {
		if err = b.try(http.MethodPost, "/element/"+b.element(css)+"/click", map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), "stale element") {
			break
		}
	}
	if err != nil {
		b.t.Fatal(err)
	}
}

// Type types text into the first element matching css.
func (b *Browser) Type(css, text string) {
	b.t.Helper()
	b.call(http.MethodPost, "/element/"+b.element(css)+"/value", map[string]string{"text": text}, nil)
}

// LogEntry is one line of the browser's console (and its network errors).
type LogEntry struct {
	Level   string `json:"level"`
	Message string `json:"message"`
	Source  string `json:"source"`
}

// ConsoleLog returns, and clears, what the browser logged since the last call.
func (b *Browser) ConsoleLog() []LogEntry {
	b.t.Helper()
	var out []LogEntry
	b.call(http.MethodPost, "/se/log", map[string]string{"type": "browser"}, &out)
	return out
}
