// Port of duroxide's provider validation module lock_expiration
// (src/provider_validation/lock_expiration.rs, snapshot 0.1.26, commit 58cdc0e).
//
// duroxide fetches some worker items with a fixed 1 s lock and sleeps 1.1–1.2 s (its
// SQLite factory's lock timeout is also 1 s); the port uses the factory's LockTimeout
// for those locks and lets them lapse with the same margins.

package conformance

import (
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "LockExpiration", cases: []providerCase{
		{"LockExpiresAfterTimeout", "test_lock_expires_after_timeout", testLockExpirationLockExpiresAfterTimeout},
		{"AbandonReleasesLockImmediately", "test_abandon_releases_lock_immediately", testLockExpirationAbandonReleasesLockImmediately},
		{"LockRenewalOnAck", "test_lock_renewal_on_ack", testLockExpirationLockRenewalOnAck},
		{"ConcurrentLockAttemptsRespectExpiration", "test_concurrent_lock_attempts_respect_expiration", testLockExpirationConcurrentLockAttemptsRespectExpiration},
		{"WorkerLockRenewalSuccess", "test_worker_lock_renewal_success", testLockExpirationWorkerLockRenewalSuccess},
		{"WorkerLockRenewalInvalidToken", "test_worker_lock_renewal_invalid_token", testLockExpirationWorkerLockRenewalInvalidToken},
		{"WorkerLockRenewalAfterExpiration", "test_worker_lock_renewal_after_expiration", testLockExpirationWorkerLockRenewalAfterExpiration},
		{"WorkerLockRenewalExtendsTimeout", "test_worker_lock_renewal_extends_timeout", testLockExpirationWorkerLockRenewalExtendsTimeout},
		{"WorkerLockRenewalAfterAck", "test_worker_lock_renewal_after_ack", testLockExpirationWorkerLockRenewalAfterAck},
		{"AbandonWorkItemReleasesLock", "test_abandon_work_item_releases_lock", testLockExpirationAbandonWorkItemReleasesLock},
		{"AbandonWorkItemWithDelay", "test_abandon_work_item_with_delay", testLockExpirationAbandonWorkItemWithDelay},
		{"WorkerAckFailsAfterLockExpiry", "test_worker_ack_fails_after_lock_expiry", testLockExpirationWorkerAckFailsAfterLockExpiry},
		{"OrchestrationLockRenewalAfterExpiration", "test_orchestration_lock_renewal_after_expiration", testLockExpirationOrchestrationLockRenewalAfterExpiration},
	}})
}

// leActivity is the ActivityExecute the worker-side cases enqueue.
func leActivity(instance string) provider.WorkItem {
	return activityExecute(instance, 1, 1, "TestActivity", "test")
}

// leDone is the completion the worker-side cases ack with.
func leDone(instance string) *provider.WorkItem {
	return ptr(activityCompleted(instance, 1, 1, "done"))
}

// testLockExpirationLockExpiresAfterTimeout: a lapsed lock frees the instance with a
// new token, and the old token no longer acks.
func testLockExpirationLockExpiresAfterTimeout(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	first := mustFetchOrch(t, p, e.lt(), "the start of "+inst)
	atomNoOrch(t, p, e.lt(), "the instance is locked")

	time.Sleep(e.lapse())

	second := mustFetchOrch(t, p, e.lt(), inst+" after its lock lapsed")
	if second.Instance != inst {
		t.Fatalf("refetched instance %q; want %q", second.Instance, inst)
	}
	if second.LockToken == first.LockToken {
		t.Fatalf("the refetch reused lock token %q; want a new one", first.LockToken)
	}

	err := p.AckOrchestrationItem(t.Context(), first.LockToken, provider.OrchestrationAck{ExecutionID: 1})
	mustFailWith(t, err, provider.ErrLockLost, "ack with the lapsed (and re-issued) lock's token")
}

// testLockExpirationAbandonReleasesLockImmediately: abandon frees the instance
// without waiting for expiry.
func testLockExpirationAbandonReleasesLockImmediately(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, e.lt(), "the start of "+inst)
	atomNoOrch(t, p, e.lt(), "the instance is locked")

	if err := p.AbandonOrchestrationItem(t.Context(), item.LockToken, 0, false); err != nil {
		t.Fatalf("AbandonOrchestrationItem: %v", err)
	}

	again := mustFetchOrch(t, p, e.lt(), inst+" right after the abandon")
	if again.Instance != inst {
		t.Fatalf("refetched instance %q; want %q", again.Instance, inst)
	}
}

// testLockExpirationLockRenewalOnAck (the name is historical): a message arriving
// during the lock waits for it; a successful ack releases the lock at once.
func testLockExpirationLockRenewalOnAck(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, e.lt(), "the start of "+inst)
	atomNoOrch(t, p, e.lt(), "the instance is locked")

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	atomNoOrch(t, p, e.lt(), "a message that arrives during the lock waits for it")

	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomStarted(inst, 1)},
	})

	again := mustFetchOrch(t, p, e.lt(), "the new message right after the ack")
	if again.Instance != inst {
		t.Fatalf("fetched instance %q; want %q", again.Instance, inst)
	}
}

// testLockExpirationConcurrentLockAttemptsRespectExpiration: concurrent fetchers all
// see the lock until it lapses; then a fetch succeeds.
func testLockExpirationConcurrentLockAttemptsRespectExpiration(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	mustFetchOrch(t, p, e.lt(), "the start of "+inst)
	locked := time.Now()

	ctx := t.Context()
	results := make([]ilFetchResult, 5)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			item, err := p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: e.lt()})
			results[i] = ilFetchResult{item, err}
		})
	}
	time.Sleep(200 * time.Millisecond)
	wg.Wait()
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("fetcher %d: FetchOrchestrationItem: %v", i, r.err)
		}
		if r.item != nil {
			t.Fatalf("fetcher %d locked %q while the first lock was held; want nothing", i, r.item.Instance)
		}
	}

	time.Sleep(time.Until(locked.Add(e.lapse())))

	again := mustFetchOrch(t, p, e.lt(), inst+" after its lock lapsed")
	if again.Instance != inst {
		t.Fatalf("fetched instance %q; want %q", again.Instance, inst)
	}
}

// testLockExpirationWorkerLockRenewalSuccess: a live worker lock renews and stays held.
func testLockExpirationWorkerLockRenewalSuccess(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, leActivity("test-instance"))

	lease := atomMustFetchWork(t, p, e.lt(), "the activity")
	atomNoWork(t, p, e.lt(), "the item is locked")

	time.Sleep(100 * time.Millisecond) // the activity is running

	if err := p.RenewWorkItemLock(t.Context(), lease.LockToken, e.lt()); err != nil {
		t.Fatalf("RenewWorkItemLock of a live lock: %v", err)
	}
	atomNoWork(t, p, e.lt(), "the item is still locked after the renewal")
}

// testLockExpirationWorkerLockRenewalInvalidToken: renewing an unknown token fails.
func testLockExpirationWorkerLockRenewalInvalidToken(t *testing.T, e penv) {
	p := e.open(t)
	err := p.RenewWorkItemLock(t.Context(), "invalid-token-123", longLock)
	mustFailWith(t, err, provider.ErrLockLost, "RenewWorkItemLock with token \"invalid-token-123\"")
}

// testLockExpirationWorkerLockRenewalAfterExpiration: a lapsed worker lock cannot be
// renewed.
func testLockExpirationWorkerLockRenewalAfterExpiration(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, leActivity("test-instance"))

	lease := atomMustFetchWork(t, p, e.lt(), "the activity")

	time.Sleep(e.lapse())

	err := p.RenewWorkItemLock(t.Context(), lease.LockToken, e.lt())
	mustFailWith(t, err, provider.ErrLockLost, "RenewWorkItemLock after the lock lapsed")
}

// testLockExpirationWorkerLockRenewalExtendsTimeout: a renewal at 0.6×T for T keeps
// the item locked past T.
func testLockExpirationWorkerLockRenewalExtendsTimeout(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "test-lock-renewal-extends"

	// A running orchestration schedules the activity.
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  provider.InitialExecutionID,
		HistoryDelta: []provider.Event{atomStarted(inst, provider.InitialExecutionID)},
		WorkerItems:  []provider.WorkItem{leActivity(inst)},
		Metadata: provider.ExecutionMetadata{
			OrchestrationName: ptr("TestOrch"),
			Status:            ptr(provider.StatusRunning),
		},
	})

	lock := e.lt()
	lease := atomMustFetchWork(t, p, lock, "the scheduled activity")
	fetched := time.Now()

	time.Sleep(lock * 6 / 10)
	if err := p.RenewWorkItemLock(t.Context(), lease.LockToken, lock); err != nil {
		t.Fatalf("RenewWorkItemLock at 0.6×T: %v", err)
	}
	// Without the renewal the lock would lapse at T; with it, at about 1.6×T.
	time.Sleep(time.Until(fetched.Add(lock)))

	atomNoWork(t, p, lock, "at 1.0×T the renewed lock must still be held")
}

// testLockExpirationWorkerLockRenewalAfterAck: an acked item's token no longer renews.
func testLockExpirationWorkerLockRenewalAfterAck(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, leActivity("test-instance"))

	lease := atomMustFetchWork(t, p, e.lt(), "the activity")
	atomAckWork(t, p, lease.LockToken, leDone("test-instance"))

	err := p.RenewWorkItemLock(t.Context(), lease.LockToken, e.lt())
	mustFailWith(t, err, provider.ErrLockLost, "RenewWorkItemLock after the ack")
}

// testLockExpirationAbandonWorkItemReleasesLock: abandoning a worker item makes it
// fetchable at once, under a new token.
func testLockExpirationAbandonWorkItemReleasesLock(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "test-abandon-work"
	enqueueWork(t, p, leActivity(inst))

	lease := atomMustFetchWork(t, p, e.lt(), "the activity")
	if lease.Item.Kind != provider.WorkActivityExecute {
		t.Fatalf("fetched a %s; want ActivityExecute", lease.Item.Kind)
	}
	atomNoWork(t, p, e.lt(), "the item is locked")

	if err := p.AbandonWorkItem(t.Context(), lease.LockToken, 0, false); err != nil {
		t.Fatalf("AbandonWorkItem: %v", err)
	}

	again := atomMustFetchWork(t, p, e.lt(), "the activity right after the abandon")
	if again.Item.Kind != provider.WorkActivityExecute {
		t.Fatalf("refetched a %s; want ActivityExecute", again.Item.Kind)
	}
	if again.LockToken == lease.LockToken {
		t.Fatalf("the refetch reused lock token %q; want a new one", lease.LockToken)
	}
	atomAckWork(t, p, again.LockToken, leDone(inst))
}

// testLockExpirationAbandonWorkItemWithDelay: an abandon with a delay hides the item
// until the delay passes.
func testLockExpirationAbandonWorkItemWithDelay(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "test-abandon-delay"
	enqueueWork(t, p, leActivity(inst))

	lease := atomMustFetchWork(t, p, e.lt(), "the activity")

	const delay = 500 * time.Millisecond
	if err := p.AbandonWorkItem(t.Context(), lease.LockToken, delay, false); err != nil {
		t.Fatalf("AbandonWorkItem with a delay: %v", err)
	}
	atomNoWork(t, p, e.lt(), "the abandoned item is delayed")

	time.Sleep(delay + 100*time.Millisecond)

	again := atomMustFetchWork(t, p, e.lt(), "the activity after the delay")
	if again.Item.Kind != provider.WorkActivityExecute {
		t.Fatalf("refetched a %s; want ActivityExecute", again.Item.Kind)
	}
	atomAckWork(t, p, again.LockToken, leDone(inst))
}

// testLockExpirationWorkerAckFailsAfterLockExpiry: a worker ack after the lock lapsed
// fails even if nobody refetched, and the item stays queued.
func testLockExpirationWorkerAckFailsAfterLockExpiry(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "ack-expiry-test"
	enqueueWork(t, p, leActivity(inst))

	lease := atomMustFetchWork(t, p, e.lt(), "the activity")

	time.Sleep(e.lt() + 200*time.Millisecond)

	err := p.AckWorkItem(t.Context(), lease.LockToken, leDone(inst))
	mustFailWith(t, err, provider.ErrLockLost, "AckWorkItem after the lock lapsed")

	atomMustFetchWork(t, p, 5*time.Second, "the item again: the rejected ack must not delete it")
}

// testLockExpirationOrchestrationLockRenewalAfterExpiration: a lapsed orchestration
// lock cannot be renewed.
func testLockExpirationOrchestrationLockRenewalAfterExpiration(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "orch-renewal-expiry"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, e.lt(), "the start of "+inst)

	time.Sleep(e.lapse())

	err := p.RenewOrchestrationItemLock(t.Context(), item.LockToken, e.lt())
	mustFailWith(t, err, provider.ErrLockLost, "RenewOrchestrationItemLock after the lock lapsed")
}
