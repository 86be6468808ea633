// Port of duroxide's provider validation module long_polling
// (src/provider_validation/long_polling.rs, snapshot 0.1.26, commit 58cdc0e).
//
// duroxide's harness wires the short-poll cases for providers that ignore the poll
// timeout and the long-poll cases for those that wait; here ProviderFactory.LongPolling
// decides, and the cases that do not apply skip, saying so.

package conformance

import (
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "LongPolling", cases: []providerCase{
		{"ShortPollReturnsImmediately", "test_short_poll_returns_immediately", testLongPollingShortPollReturnsImmediately},
		{"LongPollWaitsForTimeout", "test_long_poll_waits_for_timeout", testLongPollingLongPollWaitsForTimeout},
		{"FetchRespectsTimeoutUpperBound", "test_fetch_respects_timeout_upper_bound", testLongPollingFetchRespectsTimeoutUpperBound},
		{"ShortPollWorkItemReturnsImmediately", "test_short_poll_work_item_returns_immediately", testLongPollingShortPollWorkItemReturnsImmediately},
		{"LongPollWorkItemWaitsForTimeout", "test_long_poll_work_item_waits_for_timeout", testLongPollingLongPollWorkItemWaitsForTimeout},
	}})
}

// lpOnlyShort skips unless the provider short-polls.
func lpOnlyShort(t *testing.T, e penv) {
	t.Helper()
	if e.f.LongPolling {
		t.Skip("applies to short-polling providers; this provider long-polls (ProviderFactory.LongPolling is set)")
	}
}

// lpOnlyLong skips unless the provider long-polls.
func lpOnlyLong(t *testing.T, e penv) {
	t.Helper()
	if !e.f.LongPolling {
		t.Skip("applies to long-polling providers; this provider short-polls (ProviderFactory.LongPolling is not set)")
	}
}

// lpFetchOrch times an orchestration fetch of an empty provider, requiring nothing.
func lpFetchOrch(t *testing.T, p provider.Provider, poll time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	item, err := p.FetchOrchestrationItem(t.Context(), provider.FetchOptions{LockTimeout: longLock, PollTimeout: poll})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("FetchOrchestrationItem: %v", err)
	}
	if item != nil {
		t.Fatalf("FetchOrchestrationItem of an empty provider returned instance %q", item.Instance)
	}
	return elapsed
}

// lpFetchWork times a worker fetch of an empty provider, requiring nothing.
func lpFetchWork(t *testing.T, p provider.Provider, poll time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	lease, err := p.FetchWorkItem(t.Context(), provider.WorkFetchOptions{LockTimeout: longLock, PollTimeout: poll})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("FetchWorkItem: %v", err)
	}
	if lease != nil {
		t.Fatalf("FetchWorkItem of an empty provider returned %s %q", lease.Item.Kind, lease.Item.Name)
	}
	return elapsed
}

// testLongPollingShortPollReturnsImmediately: a short-polling provider ignores the
// poll timeout of an empty orchestration fetch.
func testLongPollingShortPollReturnsImmediately(t *testing.T, e penv) {
	lpOnlyShort(t, e)
	p := e.open(t)
	if elapsed := lpFetchOrch(t, p, 500*time.Millisecond); elapsed >= e.f.ShortPollThreshold {
		t.Fatalf("empty FetchOrchestrationItem (poll timeout 500ms) took %v; a short-polling provider must answer within %v",
			elapsed, e.f.ShortPollThreshold)
	}
}

// testLongPollingLongPollWaitsForTimeout: a long-polling provider waits the whole
// poll timeout for orchestration work.
func testLongPollingLongPollWaitsForTimeout(t *testing.T, e penv) {
	t.Parallel()
	lpOnlyLong(t, e)
	p := e.open(t)
	const poll = 500 * time.Millisecond
	if elapsed := lpFetchOrch(t, p, poll); elapsed < poll {
		t.Fatalf("empty FetchOrchestrationItem returned after %v; a long-polling provider must wait the poll timeout %v",
			elapsed, poll)
	}
}

// testLongPollingFetchRespectsTimeoutUpperBound: no provider blocks much beyond the
// poll timeout.
func testLongPollingFetchRespectsTimeoutUpperBound(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const poll, tolerance = 300 * time.Millisecond, 200 * time.Millisecond
	if elapsed := lpFetchOrch(t, p, poll); elapsed >= poll+tolerance {
		t.Fatalf("empty FetchOrchestrationItem (poll timeout %v) took %v; want under %v", poll, elapsed, poll+tolerance)
	}
}

// testLongPollingShortPollWorkItemReturnsImmediately: a short-polling provider
// ignores the poll timeout of an empty worker fetch.
func testLongPollingShortPollWorkItemReturnsImmediately(t *testing.T, e penv) {
	lpOnlyShort(t, e)
	p := e.open(t)
	if elapsed := lpFetchWork(t, p, 500*time.Millisecond); elapsed >= e.f.ShortPollThreshold {
		t.Fatalf("empty FetchWorkItem (poll timeout 500ms) took %v; a short-polling provider must answer within %v",
			elapsed, e.f.ShortPollThreshold)
	}
}

// testLongPollingLongPollWorkItemWaitsForTimeout: a long-polling provider waits the
// whole poll timeout for worker items.
func testLongPollingLongPollWorkItemWaitsForTimeout(t *testing.T, e penv) {
	t.Parallel()
	lpOnlyLong(t, e)
	p := e.open(t)
	const poll = 500 * time.Millisecond
	if elapsed := lpFetchWork(t, p, poll); elapsed < poll {
		t.Fatalf("empty FetchWorkItem returned after %v; a long-polling provider must wait the poll timeout %v",
			elapsed, poll)
	}
}
