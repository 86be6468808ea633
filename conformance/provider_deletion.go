package conformance

// Port of duroxide's provider validation module deletion
// (src/provider_validation/deletion.rs, snapshot 0.1.26, commit 58cdc0e).
//
// Deletion through ProviderAdmin: terminal and forced deletes, cascades over
// sub-orchestration trees, the tree primitives (children, parent, tree, atomic
// multi-delete) and the safety properties of a delete that races a held lock (the
// ack must fail and not recreate the instance; a stale worker ack must fail).

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "Deletion", cases: []providerCase{
		{"DeleteTerminalInstances", "test_delete_terminal_instances", testDelTerminalInstances},
		{"DeleteRunningRejectedForceSucceeds", "test_delete_running_rejected_force_succeeds", testDelRunningRejectedForceSucceeds},
		{"DeleteNonexistentInstance", "test_delete_nonexistent_instance", testDelNonexistentInstance},
		{"DeleteCleansQueuesAndLocks", "test_delete_cleans_queues_and_locks", testDelCleansQueuesAndLocks},
		{"CascadeDeleteHierarchy", "test_cascade_delete_hierarchy", testDelCascadeHierarchy},
		{"ForceDeletePreventsAckRecreation", "test_force_delete_prevents_ack_recreation", testDelForcePreventsAckRecreation},
		{"ListChildren", "test_list_children", testDelListChildren},
		{"DeleteGetParentID", "test_delete_get_parent_id", testDelGetParentID},
		{"DeleteGetInstanceTree", "test_delete_get_instance_tree", testDelGetInstanceTree},
		{"DeleteInstancesAtomic", "test_delete_instances_atomic", testDelInstancesAtomic},
		{"DeleteInstancesAtomicForce", "test_delete_instances_atomic_force", testDelInstancesAtomicForce},
		{"DeleteInstancesAtomicOrphanDetection", "test_delete_instances_atomic_orphan_detection", testDelInstancesAtomicOrphanDetection},
		{"StaleActivityAfterDeleteRecreate", "test_stale_activity_after_delete_recreate", testDelStaleActivityAfterRecreate},
	}})
}

// ---- helpers (shared with provider_bulk_deletion.go) ----

// delFinishedInstance starts instance (as a sub-orchestration of parent when parent is
// not "") and acks its first turn with the OrchestrationStarted event and metadata
// status, output, TestOrch 1.0.0 and the parent link: duroxide's
// create_completed_instance_with_parent and create_failed/cancelled_instance.
func delFinishedInstance(t *testing.T, p provider.Provider, instance, parent, status, output string) {
	t.Helper()
	start := startItem(instance, "TestOrch", "1.0.0", "{}")
	started := startedEvent(1, "TestOrch", "1.0.0", "{}")
	md := metadata("TestOrch", "1.0.0")
	md.Status, md.Output = ptr(status), ptr(output)
	if parent != "" {
		start.ParentInstance, start.ParentID = parent, 1
		started.ParentInstance, started.ParentID = parent, 1
		md.ParentInstanceID = ptr(parent)
	}
	enqueueOrch(t, p, start, 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+instance)
	if item.Instance != instance {
		t.Fatalf("fetched instance %q, want %q", item.Instance, instance)
	}
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{started},
		Metadata:     md,
	})
}

// delCompleted creates a root instance completed with output "done".
func delCompleted(t *testing.T, p provider.Provider, instance string) {
	t.Helper()
	delFinishedInstance(t, p, instance, "", provider.StatusCompleted, "done")
}

// delCompletedChild creates a completed sub-orchestration of parent.
func delCompletedChild(t *testing.T, p provider.Provider, instance, parent string) {
	t.Helper()
	delFinishedInstance(t, p, instance, parent, provider.StatusCompleted, "done")
}

// delChildInstance is duroxide's create_child_instance (deletion.rs): a start naming
// the parent (no parent id), acked as a completed "ChildOrch" linked to parent.
func delChildInstance(t *testing.T, p provider.Provider, instance, parent string) {
	t.Helper()
	start := startItem(instance, "TestOrch", "1.0.0", "{}")
	start.ParentInstance = parent
	enqueueOrch(t, p, start, 0)
	item := mustFetchOrch(t, p, 5*time.Second, "the start of "+instance)
	if item.Instance != instance {
		t.Fatalf("fetched instance %q, want %q", item.Instance, instance)
	}
	started := startedEvent(1, "ChildOrch", "1.0.0", "{}")
	started.ParentInstance = parent
	md := metadata("ChildOrch", "1.0.0")
	md.Status, md.Output, md.ParentInstanceID = ptr(provider.StatusCompleted), ptr("done"), ptr(parent)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: 1, HistoryDelta: []provider.Event{started}, Metadata: md})
}

// delMustExist and delMustBeGone check an instance through GetInstanceInfo.
func delMustExist(t *testing.T, a provider.ProviderAdmin, instance, why string) {
	t.Helper()
	if _, err := a.GetInstanceInfo(t.Context(), instance); err != nil {
		t.Fatalf("GetInstanceInfo(%s): %v; want the instance to exist: %s", instance, err, why)
	}
}

func delMustBeGone(t *testing.T, a provider.ProviderAdmin, instance, why string) {
	t.Helper()
	if info, err := a.GetInstanceInfo(t.Context(), instance); err == nil {
		t.Fatalf("GetInstanceInfo(%s) = %+v; want an error: %s", instance, info, why)
	}
}

// delDelete is DeleteInstance that fails the test on error.
func delDelete(t *testing.T, a provider.ProviderAdmin, instance string, force bool) provider.DeleteInstanceResult {
	t.Helper()
	res, err := a.DeleteInstance(t.Context(), instance, force)
	if err != nil {
		t.Fatalf("DeleteInstance(%s, force=%v): %v", instance, force, err)
	}
	return res
}

// delErrMentions fails unless err's text contains one of words (case-insensitive).
func delErrMentions(t *testing.T, err error, what string, words ...string) {
	t.Helper()
	msg := strings.ToLower(err.Error())
	for _, w := range words {
		if strings.Contains(msg, w) {
			return
		}
	}
	t.Fatalf("%s failed with %q; want an error mentioning one of %q", what, err, words)
}

// ---- cases ----

func testDelTerminalInstances(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const completed, failed, cancelled = "delete-term-completed", "delete-term-failed", "delete-term-cancelled"
	delCompleted(t, p, completed)
	delFinishedInstance(t, p, failed, "", provider.StatusFailed, "error: something went wrong")
	// A cancelled instance is stored as Failed with a "cancelled: ..." output.
	delFinishedInstance(t, p, cancelled, "", provider.StatusFailed, "cancelled: user requested cancellation")
	for _, id := range []string{completed, failed, cancelled} {
		delMustExist(t, a, id, "it was just created")
	}

	res := delDelete(t, a, completed, false)
	if res.InstancesDeleted < 1 || res.ExecutionsDeleted < 1 || res.EventsDeleted < 1 {
		t.Fatalf("DeleteInstance(completed) reported %+v; want at least 1 instance, 1 execution and 1 event deleted", res)
	}
	delMustBeGone(t, a, completed, "the completed instance was deleted")

	for _, id := range []string{failed, cancelled} {
		if res := delDelete(t, a, id, false); res.InstancesDeleted < 1 {
			t.Fatalf("DeleteInstance(%s) reported %+v; want at least 1 instance deleted", id, res)
		}
		delMustBeGone(t, a, id, "the terminal instance was deleted")
	}
}

func testDelRunningRejectedForceSucceeds(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const inst = "delete-running-force"
	createInstance(t, p, inst)

	_, err := a.DeleteInstance(t.Context(), inst, false)
	mustFail(t, err, "DeleteInstance of a running instance without force")
	if provider.IsRetryable(err) {
		t.Fatalf("DeleteInstance of a running instance failed with a retryable error (%v); want a permanent one", err)
	}
	delErrMentions(t, err, "DeleteInstance of a running instance without force", "running")
	delMustExist(t, a, inst, "a rejected delete changes nothing")

	if res := delDelete(t, a, inst, true); res.InstancesDeleted < 1 {
		t.Fatalf("DeleteInstance(running, force) reported %+v; want at least 1 instance deleted", res)
	}
	delMustBeGone(t, a, inst, "the force delete removed it")
}

func testDelNonexistentInstance(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	_, err := a.DeleteInstance(t.Context(), "does-not-exist-12345", false)
	mustFailWith(t, err, provider.ErrNotFound, "DeleteInstance of an unknown instance")
	if provider.IsRetryable(err) {
		t.Fatalf("DeleteInstance of an unknown instance failed with a retryable error (%v); want a permanent one", err)
	}
	delErrMentions(t, err, "DeleteInstance of an unknown instance", "not found")
}

func testDelCleansQueuesAndLocks(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const inst = "delete-queues-locks"
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	enqueueWork(t, p, activityExecute(inst, 1, 1, "TestActivity", "{}"))
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)
	md := metadata("TestOrch", "1.0.0")
	md.Status = ptr(provider.StatusCompleted)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{startedEvent(1, "TestOrch", "1.0.0", "{}")},
		Metadata:     md,
	})

	res := delDelete(t, a, inst, false)
	if res.QueueMessagesDeleted < 1 {
		t.Fatalf("DeleteInstance reported %+v; want QueueMessagesDeleted >= 1 (the pending activity)", res)
	}

	// The id is reusable: no stale lock or data blocks a new instance of another name.
	const newName, newInput = "ReusedOrch", `{"reused": true}`
	enqueueOrch(t, p, startItem(inst, newName, "2.0.0", newInput), 0)
	item = mustFetchOrch(t, p, longLock, "the start of the recreated "+inst)
	if item.OrchestrationName != newName {
		t.Fatalf("fetched item of the recreated instance has orchestration name %q; want %q", item.OrchestrationName, newName)
	}
	err := p.AckOrchestrationItem(t.Context(), item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{startedEvent(1, newName, "2.0.0", newInput)},
		Metadata:     metadata(newName, "2.0.0"),
	})
	if err != nil {
		t.Fatalf("AckOrchestrationItem recreating a deleted instance: %v; want success (the delete clears locks)", err)
	}
	info, err := a.GetInstanceInfo(t.Context(), inst)
	if err != nil {
		t.Fatalf("GetInstanceInfo(recreated %s): %v", inst, err)
	}
	if info.OrchestrationName != newName {
		t.Fatalf("recreated instance has orchestration name %q; want %q, not stale data", info.OrchestrationName, newName)
	}
	delDelete(t, a, inst, true)
}

func testDelCascadeHierarchy(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const root, child1, child2, grandchild = "cascade-root", "cascade-child1", "cascade-child2", "cascade-grandchild"
	delCompleted(t, p, root)
	delCompletedChild(t, p, child1, root)
	delCompletedChild(t, p, child2, root)
	delCompletedChild(t, p, grandchild, child1)
	for _, id := range []string{root, child1, child2, grandchild} {
		delMustExist(t, a, id, "it was just created")
	}

	_, err := a.DeleteInstance(t.Context(), child1, false)
	mustFail(t, err, "DeleteInstance of a sub-orchestration")
	delErrMentions(t, err, "DeleteInstance of a sub-orchestration", "sub-orchestration", "root", "parent")
	_, err = a.DeleteInstance(t.Context(), child1, true)
	mustFail(t, err, "DeleteInstance of a sub-orchestration with force")
	_, err = a.DeleteInstance(t.Context(), grandchild, false)
	mustFail(t, err, "DeleteInstance of a nested sub-orchestration")

	res := delDelete(t, a, root, false)
	if res.InstancesDeleted < 1 {
		t.Fatalf("DeleteInstance(root) reported %+v; want at least 1 instance deleted", res)
	}
	if res.ExecutionsDeleted < 4 {
		t.Fatalf("DeleteInstance(root) reported %+v; want ExecutionsDeleted >= 4 (counts aggregated over the tree)", res)
	}
	for _, id := range []string{root, child1, child2, grandchild} {
		delMustBeGone(t, a, id, "deleting the root cascades to its descendants")
	}
}

func testDelForcePreventsAckRecreation(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const inst = "zombie-prevention"
	createInstance(t, p, inst)

	enqueueOrch(t, p, externalRaised(inst, "test-event", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the external event of "+inst)

	if res := delDelete(t, a, inst, true); res.InstancesDeleted < 1 {
		t.Fatalf("DeleteInstance(force) while a turn holds the lock reported %+v; want at least 1 instance deleted", res)
	}

	err := p.AckOrchestrationItem(t.Context(), item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{{Kind: provider.EventExternalEvent, EventID: 2, Name: "test-event", Data: "{}"}},
	})
	mustFail(t, err, "AckOrchestrationItem with a lock held across a force delete")
	delMustBeGone(t, a, inst, "a failed ack after a force delete must not recreate the instance")
}

func testDelListChildren(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const root = "list-children-root"
	child1, child2 := root+"::sub::2", root+"::sub::3"
	grandchild := child2 + "::sub::4"
	delCompleted(t, p, root)
	delChildInstance(t, p, child1, root)
	delChildInstance(t, p, child2, root)
	delChildInstance(t, p, grandchild, child2)

	list := func(id string) []string {
		t.Helper()
		c, err := a.ListChildren(t.Context(), id)
		if err != nil {
			t.Fatalf("ListChildren(%s): %v", id, err)
		}
		return c
	}
	if c := list(root); len(c) != 2 || !slices.Contains(c, child1) || !slices.Contains(c, child2) {
		t.Fatalf("ListChildren(root) = %q; want exactly the direct children %q and %q (not the grandchild)", c, child1, child2)
	}
	if c := list(child2); len(c) != 1 || c[0] != grandchild {
		t.Fatalf("ListChildren(child2) = %q; want [%q]", c, grandchild)
	}
	if c := list(grandchild); len(c) != 0 {
		t.Fatalf("ListChildren(leaf) = %q; want none", c)
	}
	if c := list("non-existent"); len(c) != 0 {
		t.Fatalf("ListChildren(unknown) = %q; want none (and no error)", c)
	}
	delDelete(t, a, root, true)
}

func testDelGetParentID(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const root = "parent-id-root"
	child := root + "::sub::2"
	delCompleted(t, p, root)
	delChildInstance(t, p, child, root)

	if parent, err := a.GetParentID(t.Context(), root); err != nil || parent != "" {
		t.Fatalf("GetParentID(root) = %q, %v; want \"\" (no parent), nil", parent, err)
	}
	if parent, err := a.GetParentID(t.Context(), child); err != nil || parent != root {
		t.Fatalf("GetParentID(child) = %q, %v; want %q, nil", parent, err, root)
	}
	_, err := a.GetParentID(t.Context(), "non-existent")
	mustFail(t, err, "GetParentID of an unknown instance")
	delDelete(t, a, root, true)
}

func testDelGetInstanceTree(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const root = "tree-root"
	child1, child2 := root+"::sub::2", root+"::sub::3"
	grandchild := child2 + "::sub::4"
	delCompleted(t, p, root)
	delChildInstance(t, p, child1, root)
	delChildInstance(t, p, child2, root)
	delChildInstance(t, p, grandchild, child2)

	tree, err := a.GetInstanceTree(t.Context(), root)
	if err != nil {
		t.Fatalf("GetInstanceTree(root): %v", err)
	}
	if tree.RootID != root {
		t.Fatalf("GetInstanceTree(root).RootID = %q; want %q", tree.RootID, root)
	}
	if len(tree.AllIDs) != 4 {
		t.Fatalf("GetInstanceTree(root).AllIDs = %q; want the 4 instances of the tree", tree.AllIDs)
	}
	for _, id := range []string{root, child1, child2, grandchild} {
		if !slices.Contains(tree.AllIDs, id) {
			t.Fatalf("GetInstanceTree(root).AllIDs = %q; missing %q", tree.AllIDs, id)
		}
	}

	leaf, err := a.GetInstanceTree(t.Context(), grandchild)
	if err != nil {
		t.Fatalf("GetInstanceTree(leaf): %v", err)
	}
	if len(leaf.AllIDs) != 1 {
		t.Fatalf("GetInstanceTree(leaf).AllIDs = %q; want only the leaf itself", leaf.AllIDs)
	}
	delDelete(t, a, root, true)
}

func testDelInstancesAtomic(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	ids := []string{"atomic-del-1", "atomic-del-2", "atomic-del-3"}
	for _, id := range ids {
		delCompleted(t, p, id)
	}
	for _, id := range ids {
		delMustExist(t, a, id, "it was just created")
	}
	res, err := a.DeleteInstancesAtomic(t.Context(), ids, false)
	if err != nil {
		t.Fatalf("DeleteInstancesAtomic(%q): %v", ids, err)
	}
	if res.InstancesDeleted != 3 || res.ExecutionsDeleted != 3 {
		t.Fatalf("DeleteInstancesAtomic reported %+v; want exactly 3 instances and 3 executions deleted", res)
	}
	for _, id := range ids {
		delMustBeGone(t, a, id, "it was deleted atomically with the others")
	}
}

func testDelInstancesAtomicForce(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const completed, running = "atomic-force-completed", "atomic-force-running"
	delCompleted(t, p, completed)
	createInstance(t, p, running)
	ids := []string{completed, running}

	_, err := a.DeleteInstancesAtomic(t.Context(), ids, false)
	mustFail(t, err, "DeleteInstancesAtomic of a running instance without force")
	delMustExist(t, a, completed, "the rejected atomic delete deleted nothing")
	delMustExist(t, a, running, "the rejected atomic delete deleted nothing")

	res, err := a.DeleteInstancesAtomic(t.Context(), ids, true)
	if err != nil {
		t.Fatalf("DeleteInstancesAtomic(force): %v", err)
	}
	if res.InstancesDeleted < 1 {
		t.Fatalf("DeleteInstancesAtomic(force) reported %+v; want at least 1 instance deleted", res)
	}
	delMustBeGone(t, a, completed, "the forced atomic delete removed it")
	delMustBeGone(t, a, running, "the forced atomic delete removed it")
}

func testDelInstancesAtomicOrphanDetection(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const root = "orphan-detect-root"
	child := root + "::sub::2"
	delCompleted(t, p, root)
	delChildInstance(t, p, child, root)
	delMustExist(t, a, root, "it was just created")
	delMustExist(t, a, child, "it was just created")

	// Deleting the root alone would orphan the child (a child spawned after the
	// caller read the tree): it must fail and roll back.
	_, err := a.DeleteInstancesAtomic(t.Context(), []string{root}, false)
	mustFail(t, err, "DeleteInstancesAtomic of a root without its child")
	delErrMentions(t, err, "DeleteInstancesAtomic of a root without its child", "child", "orphan", "tree")
	delMustExist(t, a, root, "the failed atomic delete rolled back")
	delMustExist(t, a, child, "the failed atomic delete rolled back")

	if _, err := a.DeleteInstancesAtomic(t.Context(), []string{root, child}, false); err != nil {
		t.Fatalf("DeleteInstancesAtomic of the whole tree: %v", err)
	}
	delMustBeGone(t, a, root, "the whole tree was deleted")
	delMustBeGone(t, a, child, "the whole tree was deleted")
}

func testDelStaleActivityAfterRecreate(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const inst = "stale-activity-recreate"

	// Instance A schedules activity 2, and a worker takes it.
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)
	sched := activityScheduled(2, "OldActivity", "old-input")
	sched.SourceEventID = 2
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  provider.InitialExecutionID,
		HistoryDelta: []provider.Event{startedEvent(1, "TestOrch", "1.0.0", "{}"), sched},
		WorkerItems:  []provider.WorkItem{activityExecute(inst, provider.InitialExecutionID, 2, "OldActivity", "old-input")},
		Metadata:     metadata("TestOrch", "1.0.0"),
	})
	lease := fetchWork(t, p, longLock)
	if lease == nil {
		t.Fatal("FetchWorkItem returned nothing; want the scheduled OldActivity")
	}

	if res := delDelete(t, a, inst, true); res.InstancesDeleted < 1 {
		t.Fatalf("DeleteInstance(force) reported %+v; want at least 1 instance deleted", res)
	}
	delMustBeGone(t, a, inst, "it was force-deleted")

	// The same id is recreated: execution 1 again, same name, version and input.
	createInstance(t, p, inst)
	info, err := a.GetInstanceInfo(t.Context(), inst)
	if err != nil {
		t.Fatalf("GetInstanceInfo(recreated %s): %v", inst, err)
	}
	if info.OrchestrationName != "TestOrch" {
		t.Fatalf("recreated instance has orchestration name %q; want TestOrch", info.OrchestrationName)
	}

	// The old worker's ack must fail: its row went with the deleted instance.
	stale := activityCompleted(inst, provider.InitialExecutionID, 2, "stale-result-from-old-instance")
	mustFail(t, p.AckWorkItem(t.Context(), lease.LockToken, &stale),
		"AckWorkItem of an activity of a force-deleted (and recreated) instance")

	// The recreated instance sees no stale completion.
	enqueueOrch(t, p, externalRaised(inst, "probe-event", "{}"), 0)
	item = mustFetchOrch(t, p, longLock, "the probe event of the recreated "+inst)
	for _, m := range item.Messages {
		if m.Kind == provider.WorkActivityCompleted && strings.Contains(m.Result, "stale-result") {
			t.Fatalf("the recreated instance received the stale completion of the deleted one; messages: %+v", item.Messages)
		}
	}
	// Clean-up, errors ignored as in duroxide.
	_ = p.AckOrchestrationItem(t.Context(), item.LockToken, provider.OrchestrationAck{
		ExecutionID: provider.InitialExecutionID,
		Metadata:    provider.ExecutionMetadata{Status: ptr(provider.StatusCompleted)},
	})
	_, _ = a.DeleteInstance(t.Context(), inst, true)
}
