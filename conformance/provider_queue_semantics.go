// Port of duroxide's provider validation module queue_semantics
// (src/provider_validation/queue_semantics.rs, snapshot 0.1.26, commit 58cdc0e).

package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "QueueSemantics", cases: []providerCase{
		{"WorkerQueueFIFOOrdering", "test_worker_queue_fifo_ordering", testQueueSemanticsWorkerQueueFIFOOrdering},
		{"WorkerPeekLockSemantics", "test_worker_peek_lock_semantics", testQueueSemanticsWorkerPeekLockSemantics},
		{"WorkerAckAtomicity", "test_worker_ack_atomicity", testQueueSemanticsWorkerAckAtomicity},
		{"TimerDelayedVisibility", "test_timer_delayed_visibility", testQueueSemanticsTimerDelayedVisibility},
		{"LostLockTokenHandling", "test_lost_lock_token_handling", testQueueSemanticsLostLockTokenHandling},
		{"WorkerItemImmediateVisibility", "test_worker_item_immediate_visibility", testQueueSemanticsWorkerItemImmediateVisibility},
		{"WorkerDelayedVisibilitySkipsFutureItems", "test_worker_delayed_visibility_skips_future_items", testQueueSemanticsWorkerDelayedVisibilitySkipsFutureItems},
		{"OrphanQueueMessagesDropped", "test_orphan_queue_messages_dropped", testQueueSemanticsOrphanQueueMessagesDropped},
	}})
}

// qsStarted runs the first turn of inst: enqueue its start, fetch, ack the
// OrchestrationStarted with default metadata.
func qsStarted(t *testing.T, p provider.Provider, inst string) {
	t.Helper()
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomStarted(inst, 1)},
	})
}

// qsRequireActivity requires that lease holds ActivityExecute id.
func qsRequireActivity(t *testing.T, lease *provider.WorkItemLease, id uint64, what string) {
	t.Helper()
	if lease.Item.Kind != provider.WorkActivityExecute || lease.Item.ID != id {
		t.Fatalf("%s: fetched %s id %d (%q); want ActivityExecute id %d", what, lease.Item.Kind, lease.Item.ID, lease.Item.Name, id)
	}
}

// testQueueSemanticsWorkerQueueFIFOOrdering: worker items come out in enqueue order.
func testQueueSemanticsWorkerQueueFIFOOrdering(t *testing.T, e penv) {
	p := e.open(t)
	for i := range uint64(5) {
		enqueueWork(t, p, activityExecute("instance-A", 1, i, fmt.Sprintf("Activity%d", i), fmt.Sprintf("input%d", i)))
	}
	for i := range uint64(5) {
		lease := atomMustFetchWork(t, p, longLock, fmt.Sprintf("Activity%d", i))
		qsRequireActivity(t, lease, i, fmt.Sprintf("fetch %d", i+1))
		if want := fmt.Sprintf("Activity%d", i); lease.Item.Name != want {
			t.Fatalf("fetch %d: activity %q; want %q", i+1, lease.Item.Name, want)
		}
	}
	atomNoWork(t, p, longLock, "all 5 items were fetched")
}

// testQueueSemanticsWorkerPeekLockSemantics: a fetched item stays queued but hidden
// until acked.
func testQueueSemanticsWorkerPeekLockSemantics(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, activityExecute("instance-A", 1, 1, "Activity1", "input1"))

	lease := atomMustFetchWork(t, p, longLock, "the activity")
	if lease.Item.Kind != provider.WorkActivityExecute {
		t.Fatalf("fetched a %s; want ActivityExecute", lease.Item.Kind)
	}
	atomNoWork(t, p, longLock, "the item is locked")

	atomAckWork(t, p, lease.LockToken, ptr(activityCompleted("instance-A", 1, 1, "result1")))
	atomNoWork(t, p, longLock, "the acked item is gone")
}

// testQueueSemanticsWorkerAckAtomicity: a worker ack removes the item and delivers
// the completion to the orchestration.
func testQueueSemanticsWorkerAckAtomicity(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"
	qsStarted(t, p, inst)

	enqueueWork(t, p, activityExecute(inst, 1, 1, "Activity1", "input1"))
	lease := atomMustFetchWork(t, p, longLock, "the activity")
	atomAckWork(t, p, lease.LockToken, ptr(activityCompleted(inst, 1, 1, "result1")))

	atomNoWork(t, p, longLock, "the acked item is gone")
	item := mustFetchOrch(t, p, longLock, "the completion of the acked activity")
	if item.Instance != inst {
		t.Fatalf("fetched instance %q; want %q", item.Instance, inst)
	}
	if len(item.Messages) != 1 || item.Messages[0].Kind != provider.WorkActivityCompleted {
		t.Fatalf("fetched messages %v; want exactly one ActivityCompleted", atomMessageKinds(item.Messages))
	}
}

// testQueueSemanticsTimerDelayedVisibility: an orchestrator item enqueued with a
// delay is invisible until the delay passes (the delay, not FireAtMs, decides).
func testQueueSemanticsTimerDelayedVisibility(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "instance-A"
	qsStarted(t, p, inst)

	const delay = 5 * time.Second
	enqueueOrch(t, p, provider.WorkItem{Kind: provider.WorkTimerFired, Instance: inst, ExecutionID: 1, ID: 1, FireAtMs: 0}, delay)
	atomNoOrch(t, p, longLock, "the timer is not due yet")

	time.Sleep(delay + 100*time.Millisecond)

	item := mustFetchOrch(t, p, longLock, "the TimerFired after its delay")
	if item.Instance != inst {
		t.Fatalf("fetched instance %q; want %q", item.Instance, inst)
	}
	if len(item.Messages) != 1 || item.Messages[0].Kind != provider.WorkTimerFired {
		t.Fatalf("fetched messages %v; want exactly one TimerFired", atomMessageKinds(item.Messages))
	}
}

// testQueueSemanticsLostLockTokenHandling: an item whose token was lost is
// redelivered once the lock lapses.
func testQueueSemanticsLostLockTokenHandling(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	enqueueWork(t, p, activityExecute("instance-A", 1, 1, "Activity1", "input1"))

	atomMustFetchWork(t, p, e.lt(), "the activity") // its token is dropped: a crash
	atomNoWork(t, p, e.lt(), "the item is locked")

	time.Sleep(e.lapse())

	lease := atomMustFetchWork(t, p, e.lt(), "the activity again after the lock lapsed")
	if lease.Item.Kind != provider.WorkActivityExecute {
		t.Fatalf("refetched a %s; want ActivityExecute", lease.Item.Kind)
	}
}

// testQueueSemanticsWorkerItemImmediateVisibility: a new worker item is visible at once.
func testQueueSemanticsWorkerItemImmediateVisibility(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "test-immediate-vis"
	enqueueWork(t, p, activityExecute(inst, 1, 1, "TestActivity", "test"))

	lease := atomMustFetchWork(t, p, e.lt(), "the newly enqueued item")
	if lease.Item.Kind != provider.WorkActivityExecute || lease.Item.Name != "TestActivity" {
		t.Fatalf("fetched %s %q; want ActivityExecute %q", lease.Item.Kind, lease.Item.Name, "TestActivity")
	}
	atomAckWork(t, p, lease.LockToken, ptr(activityCompleted(inst, 1, 1, "done")))
}

// testQueueSemanticsWorkerDelayedVisibilitySkipsFutureItems: an unlocked item whose
// visibility lies in the future is skipped in favour of the next one. (duroxide uses
// the factory's lock timeout, 1–5 s there; the locks here must outlast the 600 ms
// wait, so they are long.)
func testQueueSemanticsWorkerDelayedVisibilitySkipsFutureItems(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "test-delayed-vis"
	enqueueWork(t, p, activityExecute(inst, 1, 1, "Activity1", "first"))
	enqueueWork(t, p, activityExecute(inst, 1, 2, "Activity2", "second"))

	first := atomMustFetchWork(t, p, longLock, "the first activity")
	qsRequireActivity(t, first, 1, "first fetch")

	const delay = 500 * time.Millisecond
	if err := p.AbandonWorkItem(t.Context(), first.LockToken, delay, false); err != nil {
		t.Fatalf("AbandonWorkItem with a delay: %v", err)
	}

	second := atomMustFetchWork(t, p, longLock, "the second activity (the first is delayed)")
	qsRequireActivity(t, second, 2, "fetch after the delayed abandon")
	atomNoWork(t, p, longLock, "the first item is delayed and the second is locked")

	time.Sleep(delay + 100*time.Millisecond)

	third := atomMustFetchWork(t, p, longLock, "the first activity after its delay")
	qsRequireActivity(t, third, 1, "fetch after the delay")

	atomAckWork(t, p, second.LockToken, ptr(activityCompleted(inst, 1, 2, "done")))
	atomAckWork(t, p, third.LockToken, ptr(activityCompleted(inst, 1, 1, "done")))
}

// orphanWatch is how long OrphanQueueMessagesDropped watches for dropped messages
// coming back.
const orphanWatch = 2500 * time.Millisecond

// testQueueSemanticsOrphanQueueMessagesDropped: QueueMessages for an instance that
// does not exist are dropped by the fetch (an instance created afterwards never sees
// them); for an existing instance they are delivered.
func testQueueSemanticsOrphanQueueMessagesDropped(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	queueMsg := func(inst, data string) provider.WorkItem {
		return provider.WorkItem{Kind: provider.WorkQueueMessage, Instance: inst, Name: "ConfigUpdate", Data: data}
	}

	// Part 1: no instance "orphan-test": the fetch drops its queue messages.
	enqueueOrch(t, p, queueMsg("orphan-test", "v1"), 0)
	enqueueOrch(t, p, queueMsg("orphan-test", "v2"), 0)
	atomNoOrch(t, p, 5*time.Second, "queue messages for an instance that does not exist are dropped")
	atomNoOrch(t, p, 5*time.Second, "the orphan queue messages must have been deleted, not left queued")
	// Deleted, not merely held back: once the instance exists, they never reach it
	// (watched for orphanWatch, well beyond a retry delay of a provider that would
	// hold them back: 1 s by default in duroq's).
	enqueueOrch(t, p, startItem("orphan-test", "TestOrch", "1.0.0", "{}"), 0)
	for deadline, first := time.Now().Add(orphanWatch), true; time.Now().Before(deadline); first = false {
		item := fetchOrch(t, p, 5*time.Second)
		if item == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for _, m := range item.Messages {
			if m.Kind == provider.WorkQueueMessage {
				t.Fatalf("the new instance %s received %+v, a queue message sent before it existed; want it dropped", item.Instance, m)
			}
		}
		ack := provider.OrchestrationAck{ExecutionID: item.ExecutionID}
		if first {
			ack.HistoryDelta = []provider.Event{atomStarted("orphan-test", 1)}
		}
		ackOrch(t, p, item.LockToken, ack)
	}

	// Part 2: an existing instance receives its queue message.
	const inst = "orphan-test-existing"
	createInstance(t, p, inst)
	enqueueOrch(t, p, queueMsg(inst, "v3"), 0)

	item := mustFetchOrch(t, p, 5*time.Second, "the queue message of existing instance "+inst)
	if item.Instance != inst {
		t.Fatalf("fetched instance %q; want %q", item.Instance, inst)
	}
	found := false
	for _, m := range item.Messages {
		if m.Kind == provider.WorkQueueMessage && m.Name == "ConfigUpdate" && m.Data == "v3" {
			found = true
		}
	}
	if !found {
		t.Fatalf("fetched messages %+v; want the QueueMessage ConfigUpdate=v3 among them", item.Messages)
	}
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: item.ExecutionID})
}
