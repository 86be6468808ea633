// Port of duroxide's provider validation module poison_message
// (src/provider_validation/poison_message.rs, snapshot 0.1.26, commit 58cdc0e): the
// attempt counts the runtime's poison-message detection relies on.
//
// duroxide's worker_attempt_count_increments_on_lock_expiry uses a fixed 1 s lock and
// sleeps 1.1 s; the port uses the factory's LockTimeout and lets it lapse.

package conformance

import (
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "PoisonMessage", cases: []providerCase{
		{"OrchestrationAttemptCountStartsAtOne", "orchestration_attempt_count_starts_at_one", testPoisonOrchestrationAttemptCountStartsAtOne},
		{"OrchestrationAttemptCountIncrementsOnRefetch", "orchestration_attempt_count_increments_on_refetch", testPoisonOrchestrationAttemptCountIncrementsOnRefetch},
		{"WorkerAttemptCountStartsAtOne", "worker_attempt_count_starts_at_one", testPoisonWorkerAttemptCountStartsAtOne},
		{"WorkerAttemptCountIncrementsOnLockExpiry", "worker_attempt_count_increments_on_lock_expiry", testPoisonWorkerAttemptCountIncrementsOnLockExpiry},
		{"AttemptCountIsPerMessage", "attempt_count_is_per_message", testPoisonAttemptCountIsPerMessage},
		{"AbandonWorkItemIgnoreAttemptDecrements", "abandon_work_item_ignore_attempt_decrements", testPoisonAbandonWorkItemIgnoreAttemptDecrements},
		{"AbandonOrchestrationItemIgnoreAttemptDecrements", "abandon_orchestration_item_ignore_attempt_decrements", testPoisonAbandonOrchestrationItemIgnoreAttemptDecrements},
		{"IgnoreAttemptNeverGoesNegative", "ignore_attempt_never_goes_negative", testPoisonIgnoreAttemptNeverGoesNegative},
		{"MaxAttemptCountAcrossMessageBatch", "max_attempt_count_across_message_batch", testPoisonMaxAttemptCountAcrossMessageBatch},
	}})
}

// pmOrchFetch fetches an orchestration item and requires attempt count want.
func pmOrchFetch(t *testing.T, e penv, p provider.Provider, want uint32, what string) *provider.OrchestrationItem {
	t.Helper()
	item := mustFetchOrch(t, p, e.lt(), what)
	if item.AttemptCount != want {
		t.Fatalf("%s: attempt count %d; want %d", what, item.AttemptCount, want)
	}
	return item
}

// pmWorkFetch fetches a worker item and requires attempt count want.
func pmWorkFetch(t *testing.T, p provider.Provider, lock time.Duration, want uint32, what string) *provider.WorkItemLease {
	t.Helper()
	lease := atomMustFetchWork(t, p, lock, what)
	if lease.AttemptCount != want {
		t.Fatalf("%s: attempt count %d; want %d", what, lease.AttemptCount, want)
	}
	return lease
}

// pmAbandonOrch abandons without delay.
func pmAbandonOrch(t *testing.T, p provider.Provider, token string, ignoreAttempt bool) {
	t.Helper()
	if err := p.AbandonOrchestrationItem(t.Context(), token, 0, ignoreAttempt); err != nil {
		t.Fatalf("AbandonOrchestrationItem(ignoreAttempt=%v): %v", ignoreAttempt, err)
	}
}

// pmAbandonWork abandons without delay.
func pmAbandonWork(t *testing.T, p provider.Provider, token string, ignoreAttempt bool) {
	t.Helper()
	if err := p.AbandonWorkItem(t.Context(), token, 0, ignoreAttempt); err != nil {
		t.Fatalf("AbandonWorkItem(ignoreAttempt=%v): %v", ignoreAttempt, err)
	}
}

// pmActivity is the ActivityExecute id of instance these cases enqueue.
func pmActivity(instance string, id uint64, name string) provider.WorkItem {
	return activityExecute(instance, provider.InitialExecutionID, id, name, "{}")
}

// pmDone is its completion.
func pmDone(instance string, id uint64) *provider.WorkItem {
	return ptr(activityCompleted(instance, provider.InitialExecutionID, id, "done"))
}

// testPoisonOrchestrationAttemptCountStartsAtOne: the first orchestration fetch
// reports attempt 1.
func testPoisonOrchestrationAttemptCountStartsAtOne(t *testing.T, e penv) {
	p := e.open(t)
	enqueueOrch(t, p, startItem("poison-test-1", "TestOrch", "1.0.0", "{}"), 0)
	item := pmOrchFetch(t, e, p, 1, "first fetch")
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: provider.InitialExecutionID})
}

// testPoisonOrchestrationAttemptCountIncrementsOnRefetch: each fetch after an
// abandon counts one more attempt.
func testPoisonOrchestrationAttemptCountIncrementsOnRefetch(t *testing.T, e penv) {
	p := e.open(t)
	enqueueOrch(t, p, startItem("poison-test-2", "TestOrch", "1.0.0", "{}"), 0)

	item := pmOrchFetch(t, e, p, 1, "first fetch")
	pmAbandonOrch(t, p, item.LockToken, false)
	item = pmOrchFetch(t, e, p, 2, "second fetch")
	pmAbandonOrch(t, p, item.LockToken, false)
	item = pmOrchFetch(t, e, p, 3, "third fetch")

	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: provider.InitialExecutionID})
}

// testPoisonWorkerAttemptCountStartsAtOne: the first worker fetch reports attempt 1.
func testPoisonWorkerAttemptCountStartsAtOne(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "poison-test-3"
	enqueueWork(t, p, pmActivity(inst, 1, "TestActivity"))

	lease := pmWorkFetch(t, p, e.lt(), 1, "first fetch")
	atomAckWork(t, p, lease.LockToken, pmDone(inst, 1))
	if lease.Item.Kind != provider.WorkActivityExecute {
		t.Fatalf("fetched a %s; want ActivityExecute", lease.Item.Kind)
	}
}

// testPoisonWorkerAttemptCountIncrementsOnLockExpiry: a refetch after the lock lapsed
// counts as another attempt.
func testPoisonWorkerAttemptCountIncrementsOnLockExpiry(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "poison-test-4"
	enqueueWork(t, p, pmActivity(inst, 1, "TestActivity"))

	pmWorkFetch(t, p, e.lt(), 1, "first fetch")

	time.Sleep(e.lapse())

	lease := pmWorkFetch(t, p, e.lt(), 2, "fetch after the lock lapsed")
	atomAckWork(t, p, lease.LockToken, pmDone(inst, 1))
}

// testPoisonAttemptCountIsPerMessage: attempt counts belong to each item.
func testPoisonAttemptCountIsPerMessage(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, pmActivity("poison-test-5a", 1, "Activity1"))
	enqueueWork(t, p, pmActivity("poison-test-5b", 2, "Activity2"))

	first := pmWorkFetch(t, p, e.lt(), 1, "first item's first fetch")
	second := pmWorkFetch(t, p, e.lt(), 1, "second item's first fetch")
	for _, l := range []*provider.WorkItemLease{first, second} {
		if l.Item.Kind != provider.WorkActivityExecute {
			t.Fatalf("fetched a %s; want ActivityExecute", l.Item.Kind)
		}
	}
	if first.Item.ID == second.Item.ID {
		t.Fatalf("both fetches returned activity id %d; want two different items", first.Item.ID)
	}

	atomAckWork(t, p, first.LockToken, pmDone(first.Item.Instance, first.Item.ID))
	atomAckWork(t, p, second.LockToken, pmDone(second.Item.Instance, second.Item.ID))
}

// testPoisonAbandonWorkItemIgnoreAttemptDecrements: abandoning with ignoreAttempt
// takes the fetch's attempt back.
func testPoisonAbandonWorkItemIgnoreAttemptDecrements(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "poison-test-ignore-1"
	enqueueWork(t, p, pmActivity(inst, 1, "TestActivity"))

	lease := pmWorkFetch(t, p, e.lt(), 1, "first fetch")
	pmAbandonWork(t, p, lease.LockToken, false)
	lease = pmWorkFetch(t, p, e.lt(), 2, "second fetch")
	pmAbandonWork(t, p, lease.LockToken, true) // stored count back to 1
	lease = pmWorkFetch(t, p, e.lt(), 2, "third fetch (decremented, then counted again)")

	atomAckWork(t, p, lease.LockToken, pmDone(inst, 1))
}

// testPoisonAbandonOrchestrationItemIgnoreAttemptDecrements: the same on the
// orchestrator queue.
func testPoisonAbandonOrchestrationItemIgnoreAttemptDecrements(t *testing.T, e penv) {
	p := e.open(t)
	enqueueOrch(t, p, startItem("poison-test-ignore-2", "TestOrch", "1.0.0", "{}"), 0)

	item := pmOrchFetch(t, e, p, 1, "first fetch")
	pmAbandonOrch(t, p, item.LockToken, false)
	item = pmOrchFetch(t, e, p, 2, "second fetch")
	pmAbandonOrch(t, p, item.LockToken, true) // stored count back to 1
	item = pmOrchFetch(t, e, p, 2, "third fetch (decremented, then counted again)")

	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: provider.InitialExecutionID})
}

// testPoisonIgnoreAttemptNeverGoesNegative: repeated ignoreAttempt abandons floor the
// stored count at 0.
func testPoisonIgnoreAttemptNeverGoesNegative(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "poison-test-never-neg"
	enqueueWork(t, p, pmActivity(inst, 1, "TestActivity"))

	lease := pmWorkFetch(t, p, e.lt(), 1, "first fetch")
	pmAbandonWork(t, p, lease.LockToken, true) // stored count 0
	lease = pmWorkFetch(t, p, e.lt(), 1, "second fetch")
	pmAbandonWork(t, p, lease.LockToken, true) // stays 0
	lease = pmWorkFetch(t, p, e.lt(), 1, "third fetch (the count must not go below 0)")

	atomAckWork(t, p, lease.LockToken, pmDone(inst, 1))
}

// testPoisonMaxAttemptCountAcrossMessageBatch: a batch reports the largest attempt
// count of its messages, not that of a newer one.
func testPoisonMaxAttemptCountAcrossMessageBatch(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "poison-batch-test"
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)

	item := pmOrchFetch(t, e, p, 1, "first fetch")
	if len(item.Messages) != 1 {
		t.Fatalf("first fetch has %d messages %v; want 1", len(item.Messages), atomMessageKinds(item.Messages))
	}
	pmAbandonOrch(t, p, item.LockToken, false)

	item = pmOrchFetch(t, e, p, 2, "second fetch")
	enqueueOrch(t, p, activityCompleted(inst, provider.InitialExecutionID, 1, "activity result"), 0) // arrives during the lock
	pmAbandonOrch(t, p, item.LockToken, false)

	item = mustFetchOrch(t, p, e.lt(), "the start and the completion")
	if len(item.Messages) != 2 {
		t.Fatalf("third fetch has %d messages %v; want 2", len(item.Messages), atomMessageKinds(item.Messages))
	}
	if item.AttemptCount != 3 {
		t.Fatalf("third fetch: attempt count %d; want 3, the largest of the batch (the start's 3, not the completion's 1)",
			item.AttemptCount)
	}
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: provider.InitialExecutionID})
}
