package ui_test

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/duroq/duroq/internal/testenv"
	"github.com/duroq/duroq/ui"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the browser test's screenshots to docs/ui (README shows them)")

// chrome finds a Chromium-family browser: $DUROQ_CHROME, else the first of the
// usual names on PATH.
func chrome(t *testing.T) string {
	if p := os.Getenv("DUROQ_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.SkipOrFail(t, "browser tests skipped: no chromium on PATH and DUROQ_CHROME unset (apt-get install chromium)")
	return ""
}

// browser starts a headless browser for the test.
func browser(t *testing.T) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome(t)), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-component-update", true), chromedp.WindowSize(1280, 960))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting the browser: %v", err)
	}
	return ctx
}

// TestBrowser clicks through the UI in a real headless Chromium against a SQLite
// database the fixture filled: the overview, a filtered listing, a failed
// instance, a cancel confirmed on its page, a redrive of a dead letter and a pause
// of a queue. It keeps a screenshot of each main page (in docs/ui with
// -update-screenshots).
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	f := newFixture(t, backends[1].open(t), ui.Options{})
	shots := t.TempDir()
	if *updateScreenshots {
		shots = filepath.Join("..", "docs", "ui")
	}
	run := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil || len(png) < 1000 {
			t.Fatalf("screenshot %s: %d bytes, %v", name, len(png), err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := func(sel, sub string) {
		t.Helper()
		if got := text(sel); !strings.Contains(got, sub) {
			t.Errorf("%s shows %q, want %q in it", sel, got, sub)
		}
	}

	run("overview", chromedp.Navigate(f.url+"/"), chromedp.WaitVisible(chromedp.CSS("#instance-counts")))
	want("#instance-counts", "11\nstored")
	want("#recent-failures", failedID)
	want("#queues", "orders.dead")
	shot("overview.png")

	run("the instances link", chromedp.Click(chromedp.CSS(`header nav a[href="/instances"]`)), chromedp.WaitVisible(chromedp.CSS("#instances")))
	want("#instances", parentID)
	shot("instances.png")
	run("filter failed", chromedp.SetValue(chromedp.CSS(`#filter select[name="status"]`), "Failed"),
		chromedp.Click(chromedp.CSS(`#filter button[type="submit"]`)), chromedp.WaitNotPresent(chromedp.CSS(`tr[data-id="order-1"]`)))
	if got := text("#instances tbody"); strings.Contains(got, completedID) {
		t.Errorf("the Failed filter shows %q", got)
	}
	run("open the failed instance", chromedp.Click(chromedp.CSS(`tr[data-id="broken-1"] a`)), chromedp.WaitVisible(chromedp.CSS("#failure")))
	want("#failure", "card declined for dave")
	want("#history", "ActivityFailed")

	run("a completed instance", chromedp.Navigate(f.url+"/instance?id="+completedID), chromedp.WaitVisible(chromedp.CSS("#history")))
	want("#status", "Completed")
	want("#output", "charged ann, shipped to ann")
	want("#kv", "customer")
	want("#tree", "Ship")
	shot("instance.png")

	run("cancel", chromedp.Navigate(f.url+"/instance?id="+cancelID), chromedp.WaitVisible(chromedp.CSS("#actions")),
		chromedp.Click(chromedp.CSS(`#actions a[href^="/instance/cancel"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	want("#confirm", "Cancel instance")
	run("confirm the cancel", chromedp.SetValue(chromedp.CSS(`#confirm input[name="reason"]`), "customer left"),
		chromedp.Click(chromedp.CSS("#confirm-submit")), chromedp.WaitVisible(chromedp.CSS("#done")))
	want("#done", "Cancellation recorded")
	waitFor(t, f, cancelID, "Failed")
	run("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#failure")))
	want("#status", "Failed")
	want("#failure", "customer left")

	run("the queues link", chromedp.Click(chromedp.CSS(`header nav a[href="/queues"]`)), chromedp.WaitVisible(chromedp.CSS("#queues")),
		chromedp.Click(chromedp.CSS(`#queues a[href="/queue?name=orders.dead"]`)), chromedp.WaitVisible(chromedp.CSS("#messages")))
	want("#messages", deadReason)
	want("#messages", "from orders")
	shot("dead-letters.png")
	run("redrive", chromedp.Click(chromedp.CSS("#redrive-all")), chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm-submit")), chromedp.WaitVisible(chromedp.CSS("#done")))
	want("#done", "(1 moved)")
	want("#messages", "No message.")
	run("the redriven message", chromedp.Navigate(f.url+"/queue?name=orders&key=carol"), chromedp.WaitVisible(chromedp.CSS("#messages")))
	want("#messages", deadReason)

	run("pause", chromedp.Navigate(f.url+"/queue?name=orders"), chromedp.WaitVisible(chromedp.CSS("#queue-actions")),
		chromedp.Click(chromedp.CSS(`#queue-actions a[href^="/queue/pause"]`)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	want("#confirm", "Pause queue")
	run("confirm the pause", chromedp.Click(chromedp.CSS("#confirm-submit")), chromedp.WaitVisible(chromedp.CSS("#paused")))
	want("#done", "Queue paused")
	want("#queue-actions", "Resume")
	if st, err := f.p.Queue().Stats(t.Context(), "orders"); err != nil || !st.Paused {
		t.Errorf("after the pause in the browser: %+v, %v; want orders paused", st, err)
	}
}
