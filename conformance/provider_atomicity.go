// Port of duroxide's provider validation module atomicity
// (src/provider_validation/atomicity.rs, snapshot 0.1.26, commit 58cdc0e).
//
// This file also holds small helpers shared by the ports of the atomicity,
// error_handling, instance_creation, instance_locking, lock_expiration,
// multi_execution, queue_semantics, long_polling and poison_message modules
// (prefix "atom").

package conformance

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "Atomicity", cases: []providerCase{
		{"FailureRollback", "test_atomicity_failure_rollback", testAtomicityFailureRollback},
		{"MultiOperationAtomicAck", "test_multi_operation_atomic_ack", testAtomicityMultiOperationAtomicAck},
		{"LockReleasedOnlyOnSuccessfulAck", "test_lock_released_only_on_successful_ack", testAtomicityLockReleasedOnlyOnSuccessfulAck},
		{"ConcurrentAckPrevention", "test_concurrent_ack_prevention", testAtomicityConcurrentAckPrevention},
	}})
}

// ---- helpers shared by this engineer's provider_*.go files ----

// atomOn stamps ev with the instance and execution it belongs to, as duroxide's
// Event::with_event_id does.
func atomOn(instance string, execution uint64, ev provider.Event) provider.Event {
	ev.InstanceID = instance
	ev.ExecutionID = execution
	return ev
}

// atomStarted is the OrchestrationStarted (event 1) of "TestOrch" 1.0.0 with input
// "{}" that most cases append, stamped for instance and execution.
func atomStarted(instance string, execution uint64) provider.Event {
	return atomOn(instance, execution, startedEvent(provider.InitialEventID, "TestOrch", "1.0.0", "{}"))
}

// atomNoOrch requires that an orchestration fetch finds nothing.
func atomNoOrch(t *testing.T, p provider.Provider, lock time.Duration, why string) {
	t.Helper()
	if item := fetchOrch(t, p, lock); item != nil {
		t.Fatalf("FetchOrchestrationItem returned instance %q with %d message(s); want nothing: %s",
			item.Instance, len(item.Messages), why)
	}
}

// atomMustFetchWork fetches a worker item (default tag filter, no session) and
// requires one.
func atomMustFetchWork(t *testing.T, p provider.Provider, lock time.Duration, what string) *provider.WorkItemLease {
	t.Helper()
	lease := fetchWork(t, p, lock)
	if lease == nil {
		t.Fatalf("FetchWorkItem returned nothing; want %s", what)
	}
	return lease
}

// atomNoWork requires that a worker fetch finds nothing.
func atomNoWork(t *testing.T, p provider.Provider, lock time.Duration, why string) {
	t.Helper()
	if lease := fetchWork(t, p, lock); lease != nil {
		t.Fatalf("FetchWorkItem returned %s %q (id %d); want nothing: %s",
			lease.Item.Kind, lease.Item.Name, lease.Item.ID, why)
	}
}

// atomAckWork acks a worker item, failing the test on error.
func atomAckWork(t *testing.T, p provider.Provider, token string, completion *provider.WorkItem) {
	t.Helper()
	if err := p.AckWorkItem(t.Context(), token, completion); err != nil {
		t.Fatalf("AckWorkItem: %v", err)
	}
}

// atomKinds lists the kinds of events, for messages.
func atomKinds(events []provider.Event) []provider.EventKind {
	kinds := make([]provider.EventKind, len(events))
	for i, ev := range events {
		kinds[i] = ev.Kind
	}
	return kinds
}

// atomRequireKinds requires that events have exactly the kinds want, in order.
func atomRequireKinds(t *testing.T, events []provider.Event, what string, want ...provider.EventKind) {
	t.Helper()
	got := atomKinds(events)
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events %v; want %v", what, len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: got events %v; want %v", what, got, want)
		}
	}
}

// atomMessageKinds lists the kinds of work items, for messages.
func atomMessageKinds(items []provider.WorkItem) []provider.WorkItemKind {
	kinds := make([]provider.WorkItemKind, len(items))
	for i, it := range items {
		kinds[i] = it.Kind
	}
	return kinds
}

// atomCompletionIDs lists the ids of the ActivityCompleted items among items, in order.
func atomCompletionIDs(items []provider.WorkItem) []uint64 {
	var ids []uint64
	for _, it := range items {
		if it.Kind == provider.WorkActivityCompleted {
			ids = append(ids, it.ID)
		}
	}
	return ids
}

// ---- cases ----

// testAtomicityFailureRollback: a failed ack (duplicate event id) applies nothing and
// keeps the instance locked.
func testAtomicityFailureRollback(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomStarted(inst, 1)},
	})
	if h := readHistory(t, p, inst); len(h) != 1 {
		t.Fatalf("history after the first ack has %d events %v; want 1", len(h), atomKinds(h))
	}

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item2 := mustFetchOrch(t, p, longLock, "the second message of "+inst)
	err := p.AckOrchestrationItem(t.Context(), item2.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomStarted(inst, 1)}, // event id 1 again
	})
	mustFailWith(t, err, provider.ErrDuplicateEvent, "ack appending a duplicate event id 1")

	if h := readHistory(t, p, inst); len(h) != 1 {
		t.Fatalf("history after the failed ack has %d events %v; want it unchanged (1 event)", len(h), atomKinds(h))
	}
	atomNoOrch(t, p, longLock, "a failed ack must leave the instance locked")
}

// testAtomicityMultiOperationAtomicAck: one ack with history, worker items and
// orchestrator items commits all of them.
func testAtomicityMultiOperationAtomicAck(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)

	delta := []provider.Event{
		atomStarted(inst, 1),
		atomOn(inst, 1, activityScheduled(2, "Activity1", "input1")),
		atomOn(inst, 1, activityScheduled(3, "Activity2", "input2")),
		atomOn(inst, 1, activityScheduled(4, "Activity3", "input3")),
		atomOn(inst, 1, provider.Event{Kind: provider.EventTimerCreated, EventID: 5, FireAtMs: 1234567890}),
	}
	workerItems := []provider.WorkItem{
		activityExecute(inst, 1, 1, "Activity1", "input1"),
		activityExecute(inst, 1, 2, "Activity2", "input2"),
		activityExecute(inst, 1, 3, "Activity3", "input3"),
	}
	orchItems := []provider.WorkItem{
		{Kind: provider.WorkTimerFired, Instance: inst, ExecutionID: 1, ID: 1, FireAtMs: 1234567890}, // due long ago
		externalRaised(inst, "TestEvent", "test-data"),
	}
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:       1,
		HistoryDelta:      delta,
		WorkerItems:       workerItems,
		OrchestratorItems: orchItems,
	})

	if h := readHistory(t, p, inst); len(h) != 5 {
		t.Fatalf("history has %d events %v; want all 5 persisted", len(h), atomKinds(h))
	}
	for i := range 3 {
		atomMustFetchWork(t, p, longLock, fmt.Sprintf("worker item %d of 3", i+1))
	}
	atomNoWork(t, p, longLock, "the ack enqueued exactly 3 worker items")

	next := mustFetchOrch(t, p, longLock, "the TimerFired and ExternalRaised of "+inst)
	if got := atomMessageKinds(next.Messages); len(got) != 2 ||
		got[0] != provider.WorkTimerFired || got[1] != provider.WorkExternalRaised {
		t.Fatalf("fetched messages %v; want [TimerFired ExternalRaised]", got)
	}
}

// testAtomicityLockReleasedOnlyOnSuccessfulAck: an ack with a bad token fails and
// does not release the lock; only its expiry does.
func testAtomicityLockReleasedOnlyOnSuccessfulAck(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	mustFetchOrch(t, p, e.lt(), "the start of "+inst)
	atomNoOrch(t, p, e.lt(), "the instance is locked")

	err := p.AckOrchestrationItem(t.Context(), "invalid-lock-token", provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomOn(inst, 1, startedEvent(2, "TestOrch", "1.0.0", "{}"))},
	})
	mustFailWith(t, err, provider.ErrLockLost, "ack with token \"invalid-lock-token\"")
	atomNoOrch(t, p, e.lt(), "the lock must still be held after an ack with a bad token")

	time.Sleep(e.lapse())
	again := mustFetchOrch(t, p, e.lt(), inst+" after its lock lapsed")
	if again.Instance != inst {
		t.Fatalf("refetched instance %q; want %q", again.Instance, inst)
	}
}

// testAtomicityConcurrentAckPrevention: two concurrent acks with one token: exactly
// one succeeds.
func testAtomicityConcurrentAckPrevention(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)

	ctx := t.Context()
	var errs [2]error
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			errs[i] = p.AckOrchestrationItem(ctx, item.LockToken, provider.OrchestrationAck{
				ExecutionID:  1,
				HistoryDelta: []provider.Event{atomStarted(inst, 1)},
			})
		})
	}
	wg.Wait()

	var ok, failed int
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			failed++
			t.Logf("losing ack: %v", err)
		}
	}
	if ok != 1 || failed != 1 {
		t.Fatalf("concurrent acks with one token: %d succeeded, %d failed (%v); want exactly one of each",
			ok, failed, errors.Join(errs[:]...))
	}
}
