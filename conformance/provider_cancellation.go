package conformance

// Port of duroxide's provider validation module cancellation
// (src/provider_validation/cancellation.rs, snapshot 0.1.26, commit 58cdc0e).
//
// The first nine cases are the legacy "ExecutionState" checks: a provider must hand out
// and renew activities whatever the state of their orchestration (running, terminal or
// missing). The rest check activity cancellation by lock stealing: an ack's
// CancelledActivities delete worker rows (after the ack's own inserts), and the worker
// holding a deleted row sees its renew and ack fail.

import (
	"fmt"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "Cancellation", cases: []providerCase{
		{"FetchReturnsRunningStateForActiveOrchestration", "test_fetch_returns_running_state_for_active_orchestration", testCancFetchRunning},
		{"FetchReturnsTerminalStateWhenOrchestrationCompleted", "test_fetch_returns_terminal_state_when_orchestration_completed", testCancFetchCompleted},
		{"FetchReturnsTerminalStateWhenOrchestrationFailed", "test_fetch_returns_terminal_state_when_orchestration_failed", testCancFetchFailed},
		{"FetchReturnsTerminalStateWhenOrchestrationContinuedAsNew", "test_fetch_returns_terminal_state_when_orchestration_continued_as_new", testCancFetchContinuedAsNew},
		{"FetchReturnsMissingStateWhenInstanceDeleted", "test_fetch_returns_missing_state_when_instance_deleted", testCancFetchMissing},
		{"RenewReturnsRunningWhenOrchestrationActive", "test_renew_returns_running_when_orchestration_active", testCancRenewRunning},
		{"RenewReturnsTerminalWhenOrchestrationCompleted", "test_renew_returns_terminal_when_orchestration_completed", testCancRenewCompleted},
		{"RenewReturnsMissingWhenInstanceDeleted", "test_renew_returns_missing_when_instance_deleted", testCancRenewMissing},
		{"AckWorkItemNoneDeletesWithoutEnqueue", "test_ack_work_item_none_deletes_without_enqueue", testCancAckNoneDeletes},
		{"CancelledActivitiesDeletedFromWorkerQueue", "test_cancelled_activities_deleted_from_worker_queue", testCancCancelledDeleted},
		{"AckWorkItemFailsWhenEntryDeleted", "test_ack_work_item_fails_when_entry_deleted", testCancAckFailsWhenDeleted},
		{"RenewFailsWhenEntryDeleted", "test_renew_fails_when_entry_deleted", testCancRenewFailsWhenDeleted},
		{"CancellingNonexistentActivitiesIsIdempotent", "test_cancelling_nonexistent_activities_is_idempotent", testCancNonexistentIdempotent},
		{"BatchCancellationDeletesMultipleActivities", "test_batch_cancellation_deletes_multiple_activities", testCancBatch},
		{"SameActivityInWorkerItemsAndCancelledIsNoop", "test_same_activity_in_worker_items_and_cancelled_is_noop", testCancScheduleThenCancel},
		{"OrphanActivityAfterInstanceForceDeletion", "test_orphan_activity_after_instance_force_deletion", testCancOrphanAfterForceDelete},
	}})
}

// cancStarted is the OrchestrationStarted event the cancellation cases ack first
// (duroxide writes version "1.0" here, unlike create_instance's "1.0.0").
func cancStarted() provider.Event { return startedEvent(1, "TestOrch", "1.0", "{}") }

// cancRunningMeta is the metadata of a first turn that leaves the instance running.
func cancRunningMeta() provider.ExecutionMetadata {
	return provider.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), Status: ptr(provider.StatusRunning)}
}

// cancStartTurn enqueues the start of instance, fetches it and acks ack (execution 1).
func cancStartTurn(t *testing.T, p provider.Provider, instance string, ack provider.OrchestrationAck) {
	t.Helper()
	enqueueOrch(t, p, startItem(instance, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+instance)
	if item.Instance != instance {
		t.Fatalf("fetched instance %q, want %q", item.Instance, instance)
	}
	ack.ExecutionID = 1
	ackOrch(t, p, item.LockToken, ack)
}

// cancTriggerTurn enqueues an external event for instance, fetches the turn and
// acks ack (execution 1).
func cancTriggerTurn(t *testing.T, p provider.Provider, instance string, ack provider.OrchestrationAck) {
	t.Helper()
	enqueueOrch(t, p, externalRaised(instance, "Trigger", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the trigger turn of "+instance)
	ack.ExecutionID = 1
	ackOrch(t, p, item.LockToken, ack)
}

// cancMustFetchWork fetches a worker item with a 30s lock and fails when there is none.
func cancMustFetchWork(t *testing.T, p provider.Provider, what string) *provider.WorkItemLease {
	t.Helper()
	lease := fetchWork(t, p, longLock)
	if lease == nil {
		t.Fatalf("FetchWorkItem returned nothing; want %s", what)
	}
	return lease
}

// cancMustFetchNoWork requires the worker queue to have nothing to fetch.
func cancMustFetchNoWork(t *testing.T, p provider.Provider, what string) {
	t.Helper()
	if lease := fetchWork(t, p, 100*time.Millisecond); lease != nil {
		t.Fatalf("FetchWorkItem returned %s id %d (%s); want nothing: %s",
			lease.Item.Kind, lease.Item.ID, lease.Item.Name, what)
	}
}

func testCancFetchRunning(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-running"
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{cancStarted()},
		WorkerItems:  []provider.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")},
		Metadata:     cancRunningMeta(),
	})
	cancMustFetchWork(t, p, "the activity of a running orchestration")
}

func testCancFetchCompleted(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-completed"
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{
			cancStarted(),
			{Kind: provider.EventOrchestrationCompleted, EventID: 2, Output: "done"},
		},
		WorkerItems: []provider.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")},
		Metadata: provider.ExecutionMetadata{OrchestrationName: ptr("TestOrch"),
			Status: ptr(provider.StatusCompleted), Output: ptr("done")},
	})
	cancMustFetchWork(t, p, "the activity enqueued by the turn that completed the orchestration (fetch must not look at orchestration state)")
}

func testCancFetchFailed(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-failed"
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{
			cancStarted(),
			{Kind: provider.EventOrchestrationFailed, EventID: 2, Details: &provider.ErrorDetails{
				Kind: provider.ErrorApplication, AppKind: provider.AppOrchestrationFailed, Message: "boom"}},
		},
		WorkerItems: []provider.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")},
		Metadata:    provider.ExecutionMetadata{OrchestrationName: ptr("TestOrch"), Status: ptr(provider.StatusFailed)},
	})
	cancMustFetchWork(t, p, "the activity enqueued by the turn that failed the orchestration (fetch must not look at orchestration state)")
}

func testCancFetchContinuedAsNew(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-can"
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{
			cancStarted(),
			{Kind: provider.EventOrchestrationContinuedAsNew, EventID: 2, Input: "new-input"},
		},
		WorkerItems: []provider.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")},
		Metadata: provider.ExecutionMetadata{OrchestrationName: ptr("TestOrch"),
			Status: ptr(provider.StatusContinuedAsNew), Output: ptr("new-input")},
	})
	cancMustFetchWork(t, p, "the activity enqueued by the turn that continued the orchestration as new (fetch must not look at orchestration state)")
}

func testCancFetchMissing(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, activityExecute("inst-missing", 1, 1, "TestActivity", "{}"))
	cancMustFetchWork(t, p, "the activity of an instance that does not exist (fetch must not look at orchestration state)")
}

func testCancRenewRunning(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-renew-run"
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{cancStarted()},
		WorkerItems:  []provider.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")},
		Metadata:     cancRunningMeta(),
	})
	lease := cancMustFetchWork(t, p, "the activity of a running orchestration")
	if err := p.RenewWorkItemLock(t.Context(), lease.LockToken, longLock); err != nil {
		t.Fatalf("RenewWorkItemLock of the activity of a running orchestration: %v", err)
	}
}

func testCancRenewCompleted(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-renew-term"
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{cancStarted()},
		WorkerItems:  []provider.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "{}")},
		Metadata:     cancRunningMeta(),
	})
	lease := cancMustFetchWork(t, p, "the activity of a running orchestration")

	// A later turn completes the orchestration while the activity is still locked.
	cancTriggerTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{{Kind: provider.EventOrchestrationCompleted, EventID: 2, Output: "done"}},
		Metadata:     provider.ExecutionMetadata{Status: ptr(provider.StatusCompleted), Output: ptr("done")},
	})

	if err := p.RenewWorkItemLock(t.Context(), lease.LockToken, longLock); err != nil {
		t.Fatalf("RenewWorkItemLock after the orchestration completed: %v (renewal must not look at orchestration state)", err)
	}
}

func testCancRenewMissing(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, activityExecute("inst-renew-missing", 1, 1, "TestActivity", "{}"))
	lease := cancMustFetchWork(t, p, "the activity of an instance that does not exist")
	if err := p.RenewWorkItemLock(t.Context(), lease.LockToken, longLock); err != nil {
		t.Fatalf("RenewWorkItemLock of the activity of an instance that does not exist: %v (renewal must not look at orchestration state)", err)
	}
}

func testCancAckNoneDeletes(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, activityExecute("inst-ack-none", 1, 1, "TestActivity", "{}"))
	lease := cancMustFetchWork(t, p, "the enqueued activity")
	if err := p.AckWorkItem(t.Context(), lease.LockToken, nil); err != nil {
		t.Fatalf("AckWorkItem(nil completion): %v", err)
	}
	cancMustFetchNoWork(t, p, "an ack with no completion deletes the item")
	if item := fetchOrch(t, p, 100*time.Millisecond); item != nil {
		t.Fatalf("FetchOrchestrationItem returned instance %q with %d messages; want nothing: an ack with no completion enqueues nothing",
			item.Instance, len(item.Messages))
	}
}

func testCancCancelledDeleted(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-cancel-delete"
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{cancStarted()},
		WorkerItems: []provider.WorkItem{
			activityExecute(inst, 1, 1, "Activity1", "{}"),
			activityExecute(inst, 1, 2, "Activity2", "{}"),
			activityExecute(inst, 1, 3, "Activity3", "{}"),
		},
		Metadata: cancRunningMeta(),
	})

	// One of them is fetched and put back: a released item is cancellable too.
	lease := cancMustFetchWork(t, p, "one of the three scheduled activities")
	if err := p.AbandonWorkItem(t.Context(), lease.LockToken, 0, false); err != nil {
		t.Fatalf("AbandonWorkItem: %v", err)
	}

	cancTriggerTurn(t, p, inst, provider.OrchestrationAck{
		CancelledActivities: []provider.ScheduledActivityIdentifier{
			{Instance: inst, ExecutionID: 1, ActivityID: 1},
			{Instance: inst, ExecutionID: 1, ActivityID: 2},
		},
	})

	left := cancMustFetchWork(t, p, "activity 3, which was not cancelled")
	if left.Item.Kind != provider.WorkActivityExecute || left.Item.ID != 3 {
		t.Fatalf("fetched %s id %d (%s); want ActivityExecute id 3: activities 1 and 2 were cancelled",
			left.Item.Kind, left.Item.ID, left.Item.Name)
	}
	cancMustFetchNoWork(t, p, "activities 1 and 2 were cancelled and 3 is locked")
}

func testCancAckFailsWhenDeleted(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-ack-stolen"
	enqueueWork(t, p, activityExecute(inst, 1, 1, "TestActivity", "{}"))
	lease := cancMustFetchWork(t, p, "the enqueued activity")
	// Deleting the row through an ack stands in for the orchestrator's lock stealing.
	if err := p.AckWorkItem(t.Context(), lease.LockToken, nil); err != nil {
		t.Fatalf("AckWorkItem(nil completion): %v", err)
	}
	completion := activityCompleted(inst, 1, 1, "done")
	err := p.AckWorkItem(t.Context(), lease.LockToken, &completion)
	mustFail(t, err, "AckWorkItem of an item that was already deleted")
	if provider.IsRetryable(err) {
		t.Fatalf("AckWorkItem of a deleted item failed with a retryable error (%v); want a permanent one", err)
	}
}

func testCancRenewFailsWhenDeleted(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, activityExecute("inst-renew-stolen", 1, 1, "TestActivity", "{}"))
	lease := cancMustFetchWork(t, p, "the enqueued activity")
	if err := p.AckWorkItem(t.Context(), lease.LockToken, nil); err != nil {
		t.Fatalf("AckWorkItem(nil completion): %v", err)
	}
	mustFail(t, p.RenewWorkItemLock(t.Context(), lease.LockToken, longLock),
		"RenewWorkItemLock of an item that was deleted (the worker's cancellation signal)")
}

func testCancNonexistentIdempotent(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-cancel-idempotent"
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)
	err := p.AckOrchestrationItem(t.Context(), item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{cancStarted()},
		Metadata:     provider.ExecutionMetadata{OrchestrationName: ptr("TestOrch")},
		CancelledActivities: []provider.ScheduledActivityIdentifier{
			{Instance: inst, ExecutionID: 1, ActivityID: 999},
			{Instance: inst, ExecutionID: 1, ActivityID: 1},
		},
	})
	if err != nil {
		t.Fatalf("AckOrchestrationItem cancelling activities that do not exist: %v; want success (cancellation is idempotent)", err)
	}
}

func testCancBatch(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-batch-cancel"
	var items []provider.WorkItem
	var cancelled []provider.ScheduledActivityIdentifier
	for i := uint64(1); i <= 5; i++ {
		items = append(items, activityExecute(inst, 1, i, fmt.Sprintf("Activity%d", i), "{}"))
		cancelled = append(cancelled, provider.ScheduledActivityIdentifier{Instance: inst, ExecutionID: 1, ActivityID: i})
	}
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{cancStarted()},
		WorkerItems:  items,
		Metadata:     cancRunningMeta(),
	})
	cancTriggerTurn(t, p, inst, provider.OrchestrationAck{CancelledActivities: cancelled})
	cancMustFetchNoWork(t, p, "one ack cancelled all five activities")
}

func testCancScheduleThenCancel(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-schedule-then-cancel"
	// Activity 2 is scheduled and cancelled by the same ack (a future dropped in the
	// turn that created it): inserts happen before cancel-deletes, so it must be gone.
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{cancStarted()},
		WorkerItems: []provider.WorkItem{
			activityExecute(inst, 1, 2, "DroppedActivity", "{}"),
			activityExecute(inst, 1, 3, "NormalActivity", "{}"),
		},
		Metadata:            cancRunningMeta(),
		CancelledActivities: []provider.ScheduledActivityIdentifier{{Instance: inst, ExecutionID: 1, ActivityID: 2}},
	})

	lease := cancMustFetchWork(t, p, "the activity that was scheduled and not cancelled (id 3)")
	if lease.Item.Kind != provider.WorkActivityExecute || lease.Item.ID != 3 || lease.Item.Name != "NormalActivity" {
		t.Fatalf("fetched %s id %d (%s); want ActivityExecute id 3 (NormalActivity): the ack must insert worker items before deleting cancelled ones",
			lease.Item.Kind, lease.Item.ID, lease.Item.Name)
	}
	if err := p.AckWorkItem(t.Context(), lease.LockToken, nil); err != nil {
		t.Fatalf("AckWorkItem(nil completion): %v", err)
	}
	cancMustFetchNoWork(t, p, "the activity scheduled and cancelled in the same ack must not be in the queue")
}

func testCancOrphanAfterForceDelete(t *testing.T, e penv) {
	p := e.open(t)
	admin := e.admin(t, p)
	const inst = "inst-orphan-activity"
	cancStartTurn(t, p, inst, provider.OrchestrationAck{
		HistoryDelta: []provider.Event{startedEvent(1, "TestOrch", "1.0.0", "{}")},
		WorkerItems:  []provider.WorkItem{activityExecute(inst, 1, 1, "TestActivity", "test-input")},
		Metadata: provider.ExecutionMetadata{OrchestrationName: ptr("TestOrch"),
			OrchestrationVersion: ptr("1.0.0"), Status: ptr(provider.StatusRunning)},
	})

	res, err := admin.DeleteInstance(t.Context(), inst, true)
	if err != nil {
		t.Fatalf("DeleteInstance(%s, force): %v", inst, err)
	}
	if res.InstancesDeleted == 0 {
		t.Fatalf("DeleteInstance(%s, force) reported %+v; want InstancesDeleted > 0", inst, res)
	}
	if _, err := admin.GetInstanceInfo(t.Context(), inst); err == nil {
		t.Fatalf("GetInstanceInfo(%s) succeeded after the force delete; want an error", inst)
	}

	// The worker row may or may not survive the delete; if it did, running and
	// completing it must work (the completion is an orphan, which is harmless).
	lease, err := p.FetchWorkItem(t.Context(), provider.WorkFetchOptions{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("FetchWorkItem after the force delete: %v", err)
	}
	if lease == nil {
		return
	}
	completion := activityCompleted(inst, 1, 1, "orphan-result")
	if err := p.AckWorkItem(t.Context(), lease.LockToken, &completion); err != nil {
		t.Fatalf("AckWorkItem of an activity that survived its instance's deletion: %v; want success", err)
	}
}
