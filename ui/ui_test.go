package ui_test

import (
	"context"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/schedule"
	"github.com/duroq/duroq/ui"
)

// get fetches path of the UI and returns the status code and the body.
func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := noRedirects.Get(f.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// page fetches path and fails unless it answers 200 with every one of want.
func (f *fixture) page(t *testing.T, path string, want ...string) string {
	t.Helper()
	code, body := f.get(t, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", path, code, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("GET %s: no %q in the page", path, w)
		}
	}
	return body
}

// post submits form to path with the extra headers; it returns the status code and
// the redirect's location.
func (f *fixture) post(t *testing.T, path string, form url.Values, headers ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// instanceLinks are the instance ids a listing page links to, in order.
func instanceLinks(body string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`<tr data-id="([^"]+)">`).FindAllStringSubmatch(body, -1) {
		ids = append(ids, html.UnescapeString(m[1]))
	}
	return ids
}

// nextLink is the listing's next-page link ("" on the last page).
func nextLink(body string) string {
	m := regexp.MustCompile(`<a href="([^"]+)" id="next-page">`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

func TestUI(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b.open(t), ui.Options{})
			t.Run("Overview", func(t *testing.T) {
				f.page(t, "/", `<span class="n">11</span>stored`, `<span class="n">4</span>running`, `<span class="n">6</span>completed`,
					`<span class="n">1</span>failed`, `href="/instance?id=broken-1">broken-1</a>`, `<a href="/queue?name=orders">orders</a>`,
					`<a href="/queue?name=orders.dead">orders.dead</a>`)
			})
			t.Run("ListingFiltersAndPages", func(t *testing.T) { testListing(t, f) })
			t.Run("InstancePage", func(t *testing.T) { testInstancePage(t, f) })
			t.Run("QueuePages", func(t *testing.T) { testQueuePages(t, f) })
			t.Run("PauseAndResume", func(t *testing.T) { testPauseAndResume(t, f) })
			t.Run("BadRequests", func(t *testing.T) { testBadRequests(t, f) })
			t.Run("CrossOriginPostsAreRefused", func(t *testing.T) { testCrossOrigin(t, f) })
			t.Run("RaiseEvent", func(t *testing.T) { testRaise(t, f) })
			t.Run("Cancel", func(t *testing.T) { testCancel(t, f) })
			t.Run("Delete", func(t *testing.T) { testDelete(t, f) })
			t.Run("Redrive", func(t *testing.T) { testRedrive(t, f) })
			t.Run("DeleteAStuckStart", func(t *testing.T) { testDeleteMessage(t, f) })
			t.Run("Schedules", func(t *testing.T) { testSchedules(t, f) })
		})
	}
}

func testListing(t *testing.T, f *fixture) {
	all := instanceLinks(f.page(t, "/instances"))
	if len(all) != 11 {
		t.Fatalf("the first page lists %v, want the 11 instances", all)
	}
	if got := instanceLinks(f.page(t, "/instances?status=Failed")); len(got) != 1 || got[0] != failedID {
		t.Errorf("status=Failed lists %v, want [%s]", got, failedID)
	}
	if got := instanceLinks(f.page(t, "/instances?orchestration=Approval")); len(got) != 3 {
		t.Errorf("orchestration=Approval lists %v, want the 3 Approvals", got)
	}
	if got := instanceLinks(f.page(t, "/instances?parent="+parentID)); len(got) != 1 || got[0] != childID {
		t.Errorf("parent=%s lists %v, want [%s]", parentID, got, childID)
	}
	if got := instanceLinks(f.page(t, "/instances?prefix=order-&roots=1")); len(got) != 3 {
		t.Errorf("prefix=order-&roots=1 lists %v, want order-1..3", got)
	}
	future := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04")
	if got := instanceLinks(f.page(t, "/instances?created_after="+future, "No instance matches.")); len(got) != 0 {
		t.Errorf("created_after=%s lists %v", future, got)
	}
	// Pages of 3 walk the whole listing once, in order.
	var walked []string
	path := "/instances?limit=3"
	for pages := 0; path != ""; pages++ {
		if pages > 5 {
			t.Fatal("the pager does not end")
		}
		body := f.page(t, path)
		walked = append(walked, instanceLinks(body)...)
		path = nextLink(body)
	}
	if strings.Join(walked, ",") != strings.Join(all, ",") {
		t.Errorf("pages of 3 walked %v, want %v", walked, all)
	}
}

func testInstancePage(t *testing.T, f *fixture) {
	body := f.page(t, "/instance?id="+completedID, `id="status">Completed`, "charged ann, shipped to ann", "shipped",
		"<td>customer</td>", "OrchestrationStarted", "ActivityScheduled", "SubOrchestrationCompleted", "OrchestrationCompleted",
		`<strong>order-1</strong>`, "Ship")
	if strings.Contains(body, "/instance/cancel") {
		t.Error("a completed instance offers Cancel")
	}
	if !strings.Contains(body, "/instance/delete?id=order-1") {
		t.Error("a completed root instance offers no Delete")
	}
	f.page(t, "/instance?id="+failedID, `id="status">Failed`, "card declined for dave", "ActivityFailed")
	child := f.page(t, "/instance?id="+childID, `id="status">Running`, "waiting for approval", `<a href="/instance?id=parent-1">parent-1</a>`,
		`<strong>parent-1-child</strong>`, "/instance/cancel?id=parent-1-child")
	if strings.Contains(child, "/instance/delete") {
		t.Error("a sub-orchestration offers Delete (only roots can be deleted)")
	}
	// The history pages by events: ?from= shows the rest.
	f.page(t, "/instance?id="+completedID+"&execution=1&from=2", "#2")
}

func testQueuePages(t *testing.T, f *fixture) {
	f.page(t, "/queues", `<a href="/queue?name=orders">orders</a></td><td class="num">4</td><td class="num">1</td>`)
	body := f.page(t, "/queue?name=orders", "ann&#39;s first", "bob&#39;s only", "(3 bytes of binary)", "delayed")
	if strings.Contains(body, "Redrive") {
		t.Error("a queue without dead letters offers a redrive")
	}
	f.page(t, "/queue?name=orders&key=ann", "ann&#39;s third")
	if body := f.page(t, "/queue?name=orders&state=delayed", "(3 bytes of binary)"); strings.Contains(body, "ann&#39;s") {
		t.Error("state=delayed shows ann's ready messages")
	}
	if body := f.page(t, "/queue?name=orders&key=ann"); strings.Contains(body, "bob") {
		t.Error("key=ann shows bob's message")
	}
	f.page(t, "/queue?name=orchestrator", `StartOrchestration</span> Unregistered for <a href="/instance?id=stuck-1">stuck-1</a>`, "hal")
	f.page(t, "/instance?id="+stuckID, `id="status">Pending`, "Unregistered")
	f.page(t, "/queue?name=orders.dead", "dead letter", "from orders", deadReason, "dead-lettered", `{&#34;total&#34;:-5}`, `id="redrive-all"`)
	if strings.Contains(body, `id="limits"`) {
		t.Error("a queue without limits shows a limits table")
	}
	// The limits of a queue, with what each holds in flight.
	a := f.p.Queue().(mq.Admin)
	if err := a.SetLimit(t.Context(), "orders", "", mq.Limit{MaxInFlight: 3}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetLimit(t.Context(), "orders", "vip", mq.Limit{Rate: 10, Per: time.Minute}); err != nil {
		t.Fatal(err)
	}
	held, err := f.p.Queue().DequeueBatch(t.Context(), "orders", mq.DequeueOptions{LockTimeout: time.Minute})
	if err != nil || held == nil {
		t.Fatalf("dequeue under a limit: %v, %v", held, err)
	}
	f.page(t, "/queue?name=orders", `id="limits"`, "<td>the whole queue</td>\n  <td class=\"num\">1</td>\n  <td class=\"num\">3</td>",
		"<td>group vip</td>", "10 per 1m")
	if err := f.p.Queue().Abandon(t.Context(), held.Token, mq.AbandonOptions{IgnoreAttempt: true}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"", "vip"} {
		if err := a.SetLimit(t.Context(), "orders", g, mq.Limit{}); err != nil {
			t.Fatal(err)
		}
	}
}

func testBadRequests(t *testing.T, f *fixture) {
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/instance?id=nope", 404, `instance &#34;nope&#34; not found`},
		{"/instance", 400, "no instance id"},
		{"/instance?id=" + completedID + "&execution=9", 404, "has no execution 9"},
		{"/instance?id=" + completedID + "&execution=x", 400, "execution &#34;x&#34;"},
		{"/instance?id=" + completedID + "&from=9999", 400, "from &#34;9999&#34;"},
		{"/instances?status=Sleeping", 400, "status &#34;Sleeping&#34;"},
		{"/instances?limit=0", 400, "limit &#34;0&#34;"},
		{"/instances?updated_before=yesterday", 400, "updated_before &#34;yesterday&#34;"},
		{"/queue", 400, "no queue name"},
		{"/queue?name=orders&after=-1", 400, "after &#34;-1&#34;"},
		{"/queue?name=orders&state=stuck", 400, "State"},
		{"/instance/cancel?id=" + completedID, 409, "has ended"},
		{"/instance/delete?id=" + childID, 409, "sub-orchestration of &#34;parent-1&#34;"},
		{"/nowhere", 404, "no such page"},
		{"/instance?id=" + strings.Repeat("x", 1<<16), 400, "xxxxxxxxxx"},
	} {
		code, body := f.get(t, c.path)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %.80s: %d, want %d with %q", c.path, code, c.code, c.want)
		}
		if len(body) > 16<<10 {
			t.Errorf("GET %.80s: a %d-byte error page: the message is not bounded", c.path, len(body))
		}
	}
}

func testCrossOrigin(t *testing.T, f *fixture) {
	form := url.Values{"id": {cancelID}, "reason": {"forged"}}
	for _, h := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Origin", "http://evil.example"}} {
		code, _, body := f.post(t, "/instance/cancel", form, h...)
		if code != http.StatusForbidden || !strings.Contains(body, "cross-origin request refused") {
			t.Errorf("POST with %s: %s: %d, want 403", h[0], h[1], code)
		}
	}
	st, err := f.client.Status(t.Context(), cancelID)
	if err != nil || st.State != runtime.StateRunning {
		t.Fatalf("after forged cancels: %+v, %v; want it still running", st, err)
	}
	if code, _, _ := f.post(t, "/queue/pause", url.Values{"name": {"orders"}}, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("a cross-site pause: %d, want 403", code)
	}
	if qst, err := f.p.Queue().Stats(t.Context(), "orders"); err != nil || qst.Paused {
		t.Fatalf("after a forged pause: %+v, %v; want orders not paused", qst, err)
	}
}

func testRaise(t *testing.T, f *fixture) {
	f.page(t, "/instance/raise?id="+raiseID, `name="name"`, `name="data"`, `action="/instance/raise"`)
	if code, _, body := f.post(t, "/instance/raise", url.Values{"id": {raiseID}, "data": {"x"}}); code != 400 || !strings.Contains(body, "event name is required") {
		t.Errorf("a raise without a name: %d, want 400 naming the field", code)
	}
	code, loc, body := f.post(t, "/instance/raise", url.Values{"id": {raiseID}, "name": {"approve"}, "data": {"by ops"}}, "Sec-Fetch-Site", "same-origin")
	if code != http.StatusSeeOther || loc != "/instance?done=raise&id="+raiseID {
		t.Fatalf("raise: %d to %q\n%s", code, loc, body)
	}
	waitFor(t, f, raiseID, runtime.StateCompleted)
	f.page(t, loc, "Event raised", "approved: by ops")
}

func testCancel(t *testing.T, f *fixture) {
	f.page(t, "/instance/cancel?id="+cancelID, "Cancel instance &#34;approval-2&#34;?", `name="reason"`)
	code, loc, _ := f.post(t, "/instance/cancel", url.Values{"id": {cancelID}, "reason": {"customer left"}})
	if code != http.StatusSeeOther || loc != "/instance?done=cancel&id="+cancelID {
		t.Fatalf("cancel: %d to %q", code, loc)
	}
	waitFor(t, f, cancelID, runtime.StateFailed)
	f.page(t, loc, "Cancellation recorded", "customer left")
}

func testDelete(t *testing.T, f *fixture) {
	if code, _, body := f.post(t, "/instance/delete", url.Values{"id": {parentID}}); code != http.StatusBadRequest || !strings.Contains(body, "running") {
		t.Errorf("delete of a running instance without force: %d, want 400 saying it runs\n%.300s", code, body)
	}
	code, loc, _ := f.post(t, "/instance/delete", url.Values{"id": {parentID}, "force": {"1"}})
	if code != http.StatusSeeOther || loc != "/instances?done=delete" {
		t.Fatalf("forced delete: %d to %q", code, loc)
	}
	f.page(t, loc, "Instance deleted")
	for _, id := range []string{parentID, childID} {
		if code, _ := f.get(t, "/instance?id="+id); code != http.StatusNotFound {
			t.Errorf("%s after its root's deletion: %d, want 404", id, code)
		}
	}
}

func testRedrive(t *testing.T, f *fixture) {
	f.page(t, "/queue/redrive?name=orders.dead", "Redrive every dead letter of queue &#34;orders.dead&#34;")
	code, loc, _ := f.post(t, "/queue/redrive", url.Values{"name": {"orders.dead"}})
	if code != http.StatusSeeOther || loc != "/queue?done=redrive-message&n=1&name=orders.dead" {
		t.Fatalf("redrive: %d to %q", code, loc)
	}
	f.page(t, loc, "Dead letters redriven", "(1 moved)", "No message.")
	f.page(t, "/queue?name=orders&key=carol", `{&#34;total&#34;:-5}`, deadReason)
}

// testPauseAndResume pauses the queue orders from its page (its consumers then get
// nothing) and resumes it; the queue list shows which queues are paused.
func testPauseAndResume(t *testing.T, f *fixture) {
	body := f.page(t, "/queue?name=orders", `href="/queue/pause?name=orders">Pause</a>`)
	if strings.Contains(body, "/queue/resume") || strings.Contains(body, `id="paused"`) {
		t.Error("a queue that is not paused offers Resume or says it is paused")
	}
	f.page(t, "/queue/pause?name=orders", "Pause queue &#34;orders&#34;?", `action="/queue/pause"`, `name="name" value="orders"`)
	if code, _, body := f.post(t, "/queue/pause", url.Values{}); code != http.StatusBadRequest || !strings.Contains(body, "no queue name") {
		t.Errorf("a pause without a queue: %d, want 400", code)
	}
	code, loc, _ := f.post(t, "/queue/pause", url.Values{"name": {"orders"}})
	if code != http.StatusSeeOther || loc != "/queue?done=pause&name=orders" {
		t.Fatalf("pause: %d to %q", code, loc)
	}
	body = f.page(t, loc, "Queue paused", `id="paused"`, `href="/queue/resume?name=orders">Resume</a>`)
	if strings.Contains(body, "/queue/pause") {
		t.Error("a paused queue offers Pause")
	}
	f.page(t, "/queues", `<a href="/queue?name=orders">orders</a> <span class="status paused">paused</span>`)
	if b, err := f.p.Queue().DequeueBatch(t.Context(), "orders", mq.DequeueOptions{}); b != nil || err != nil {
		t.Fatalf("the queue paused from the UI delivered %+v, %v", b, err)
	}
	f.page(t, "/queue/resume?name=orders", "Resume queue &#34;orders&#34;?")
	code, loc, _ = f.post(t, "/queue/resume", url.Values{"name": {"orders"}})
	if code != http.StatusSeeOther || loc != "/queue?done=resume&name=orders" {
		t.Fatalf("resume: %d to %q", code, loc)
	}
	if body := f.page(t, loc, "Queue resumed", "/queue/pause?name=orders"); strings.Contains(body, `id="paused"`) {
		t.Error("a resumed queue says it is paused")
	}
	if st, err := f.p.Queue().Stats(t.Context(), "orders"); err != nil || st.Paused {
		t.Fatalf("after Resume in the UI: %+v, %v", st, err)
	}
}

// testDeleteMessage deletes the start no runtime can run from the orchestrator
// queue: the instance is gone.
func testDeleteMessage(t *testing.T, f *fixture) {
	body := f.page(t, "/queue?name=orchestrator", "Unregistered")
	m := regexp.MustCompile(`href="/queue/delete\?id=(\d+)&amp;name=orchestrator"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("the orchestrator queue's page offers no delete")
	}
	f.page(t, "/queue/delete?name=orchestrator&id="+m[1], "Delete message "+m[1]+" of queue &#34;orchestrator&#34;?")
	if code, _, body := f.post(t, "/queue/delete", url.Values{"name": {"orchestrator"}}); code != http.StatusBadRequest || !strings.Contains(body, "name one message") {
		t.Errorf("a delete without an id: %d, want 400", code)
	}
	code, loc, _ := f.post(t, "/queue/delete", url.Values{"name": {"orchestrator"}, "id": {m[1]}})
	if code != http.StatusSeeOther || loc != "/queue?done=delete-message&n=1&name=orchestrator" {
		t.Fatalf("delete: %d to %q", code, loc)
	}
	f.page(t, loc, "Message deleted. (1 deleted)")
	if code, _ := f.get(t, "/instance?id="+stuckID); code != http.StatusNotFound {
		t.Errorf("the stuck start after its message was deleted: %d, want 404", code)
	}
}

// testSchedules lists the schedules of the runtime's queue, pauses one from the
// page and resumes it.
func testSchedules(t *testing.T, f *fixture) {
	ctx := t.Context()
	m, err := schedule.NewManager(f.p.Queue(), schedule.ManagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.page(t, "/schedules", "No schedule.")
	for _, s := range []schedule.Schedule{
		{ID: "nightly", Cron: "0 3 * * *", TimeZone: "Europe/Paris", Jitter: time.Minute, Orchestration: &schedule.OrchestrationTarget{Name: "Report"}},
		{ID: "tick", Every: 30 * time.Second, Enqueue: &schedule.EnqueueTarget{Queue: "ticks", Payload: []byte("x")}},
	} {
		if _, err := m.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, id := range []string{"nightly", "tick"} {
			m.Delete(context.Background(), id)
		}
	})
	f.page(t, "/", `href="/schedules">Schedules</a>`)
	f.page(t, "/schedules", "<td>nightly</td>", "cron <code>0 3 * * *</code> Europe/Paris", "(jitter 1m)", "start Report",
		"<td>tick</td>", "every 30s", `enqueue to <a href="/queue?name=ticks">ticks</a>`, `href="/schedule/pause?id=tick">Pause</a>`, "active")
	f.page(t, "/schedule/pause?id=tick", "Pause schedule &#34;tick&#34;?", `action="/schedule/pause"`, `name="id" value="tick"`)
	if code, _, body := f.post(t, "/schedule/pause", url.Values{}); code != http.StatusBadRequest || !strings.Contains(body, "no schedule id") {
		t.Errorf("a pause without a schedule: %d, want 400", code)
	}
	if code, _, _ := f.post(t, "/schedule/pause", url.Values{"id": {"missing"}}); code != http.StatusNotFound {
		t.Errorf("a pause of a missing schedule: %d, want 404", code)
	}
	code, loc, _ := f.post(t, "/schedule/pause", url.Values{"id": {"tick"}})
	if code != http.StatusSeeOther || loc != "/schedules?done=schedule-pause" {
		t.Fatalf("pause: %d to %q", code, loc)
	}
	f.page(t, loc, "Schedule paused", `href="/schedule/resume?id=tick">Resume</a>`, `<span class="status paused">paused</span>`)
	if in, err := m.Get(ctx, "tick"); err != nil || !in.Paused {
		t.Fatalf("the schedule paused from the UI: %+v, %v", in, err)
	}
	code, loc, _ = f.post(t, "/schedule/resume", url.Values{"id": {"tick"}})
	if code != http.StatusSeeOther || loc != "/schedules?done=schedule-resume" {
		t.Fatalf("resume: %d to %q", code, loc)
	}
	if body := f.page(t, loc, "Schedule resumed"); strings.Contains(body, "/schedule/resume") {
		t.Error("a resumed schedule offers Resume")
	}
	if in, err := m.Get(ctx, "tick"); err != nil || in.Paused {
		t.Fatalf("the schedule resumed from the UI: %+v, %v", in, err)
	}
}

// waitFor waits until the instance reaches state.
func waitFor(t *testing.T, f *fixture, id string, state runtime.State) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := f.client.WaitForOrchestration(ctx, id)
	if err != nil || st.State != state {
		t.Fatalf("%s: %+v, %v; want %s", id, st, err, state)
	}
}

func TestReadOnly(t *testing.T) {
	f := newFixture(t, adapter.NewMemory(adapter.Options{}), ui.Options{ReadOnly: true})
	body := f.page(t, "/instance?id="+cancelID, "read-only")
	if strings.Contains(body, "/instance/cancel") || strings.Contains(body, "/instance/delete") {
		t.Error("a read-only UI offers actions")
	}
	if body := f.page(t, "/queue?name=orders.dead"); strings.Contains(body, "/queue/redrive") || strings.Contains(body, "/queue/delete") ||
		strings.Contains(body, "/queue/pause") {
		t.Error("a read-only UI offers a redrive, a delete or a pause")
	}
	for _, path := range []string{"/instance/cancel", "/queue/redrive", "/queue/delete", "/queue/pause", "/queue/resume", "/schedule/pause", "/schedule/resume"} {
		if code, _, _ := f.post(t, path, url.Values{"id": {cancelID}, "name": {"orders.dead"}}); code != http.StatusForbidden {
			t.Errorf("POST %s: %d, want 403", path, code)
		}
	}
	if code, _ := f.get(t, "/instance/cancel?id="+cancelID); code != http.StatusNotFound && code != http.StatusOK {
		t.Errorf("GET a confirmation page: %d", code)
	}
	if st, _ := f.client.Status(t.Context(), cancelID); st.State != runtime.StateRunning {
		t.Errorf("after refused actions: %s, want Running", st.State)
	}
}

func TestMountedUnderAPrefix(t *testing.T) {
	p := adapter.NewMemory(adapter.Options{})
	defer p.Close()
	h, err := ui.New(ui.Options{Provider: p, Queues: p.Queue(), Prefix: "/ops/duroq"})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/duroq/", http.StripPrefix("/ops/duroq", h))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ops/duroq/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /ops/duroq/: %d", rec.Code)
	}
	for _, want := range []string{`href="/ops/duroq/assets/style.css"`, `href="/ops/duroq/instances"`, `href="/ops/duroq/queues"`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("no %s in the overview", want)
		}
	}
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ops/duroq/assets/style.css", nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/css") {
		t.Errorf("the stylesheet: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	if _, err := ui.New(ui.Options{}); !errors.Is(err, ui.ErrNoSource) {
		t.Errorf("no provider and no queue: %v, want ErrNoSource", err)
	}
	p := adapter.NewMemory(adapter.Options{})
	defer p.Close()
	for _, prefix := range []string{"ops", "/ops/"} {
		if _, err := ui.New(ui.Options{Provider: p, Prefix: prefix}); err == nil || !strings.Contains(err.Error(), "Prefix") {
			t.Errorf("Prefix %q: %v, want an error naming Prefix", prefix, err)
		}
	}
	if _, err := ui.New(ui.Options{Queues: notAdmin{p.Queue()}}); err == nil || !strings.Contains(err.Error(), "mq.Admin") {
		t.Errorf("a queue without mq.Admin: %v", err)
	}
}

// notAdmin hides a queue's mq.Admin methods.
type notAdmin struct{ mq.MessageQueue }

func TestQueueOnlyUI(t *testing.T) {
	p := adapter.NewMemory(adapter.Options{})
	defer p.Close()
	fillQueue(t, p.Queue())
	h, err := ui.New(ui.Options{Queues: p.Queue()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	f := &fixture{url: srv.URL}
	body := f.page(t, "/", `<a href="/queue?name=orders">orders</a>`)
	if strings.Contains(body, `href="/instances"`) {
		t.Error("a queue-only UI links to instance pages")
	}
	if code, _ := f.get(t, "/instances"); code != http.StatusNotFound {
		t.Errorf("GET /instances on a queue-only UI: %d, want 404", code)
	}
	// A long text payload is text even where the display cut falls inside a rune.
	long := strings.Repeat("a", 4095) + "é"
	if err := p.Queue().Enqueue(t.Context(), mq.Message{Queue: "long", Payload: []byte(long)}); err != nil {
		t.Fatal(err)
	}
	if body := f.page(t, "/queue?name=long", "aaaa… (4097 bytes in all)"); strings.Contains(body, "bytes of binary") {
		t.Error("a UTF-8 payload cut inside a rune is shown as binary")
	}
	// A message enqueued under a span shows its trace id, what a tracing backend finds it by.
	traced := mq.Message{Queue: "traced", Payload: []byte("x"), TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	if err := p.Queue().Enqueue(t.Context(), traced); err != nil {
		t.Fatal(err)
	}
	f.page(t, "/queue?name=traced", "trace 0af7651916cd43dd8448eb211c80319c")
	// A message with a priority shows it; one of the default priority shows none.
	if err := p.Queue().Enqueue(t.Context(), mq.Message{Queue: "urgent", Payload: []byte("x"), Priority: 7}); err != nil {
		t.Fatal(err)
	}
	f.page(t, "/queue?name=urgent", "priority 7")
	if body := f.page(t, "/queue?name=traced", "trace"); strings.Contains(body, "priority") {
		t.Error("a message of the default priority shows a priority")
	}
}
