// Port of duroxide's provider validation module kv_store
// (src/provider_validation/kv_store.rs, snapshot 0.1.26, commit 58cdc0e).
//
// The provider keeps two views of an instance's key-value state: the state as of the
// end of its last finished execution (returned as OrchestrationItem.KVSnapshot) and
// the mutations of the current execution (KeyValueSet / KeyValueCleared /
// KeyValuesCleared events of the acked deltas). GetKVValue reads the mutations over
// the stored state; an execution that ends (Completed, Failed, ContinuedAsNew) folds
// its mutations into the stored state. Pruning never touches KV; deleting an
// instance removes all of it, children included.

package conformance

import (
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "KVStore", cases: []providerCase{
		{"SetAndGet", "test_kv_set_and_get", kvSetAndGet},
		{"Overwrite", "test_kv_overwrite", kvOverwrite},
		{"ClearSingle", "test_kv_clear_single", kvClearSingle},
		{"ClearAll", "test_kv_clear_all", kvClearAllCase},
		{"GetNonexistent", "test_kv_get_nonexistent", kvGetNonexistent},
		{"SnapshotInFetch", "test_kv_snapshot_in_fetch", kvSnapshotInFetch},
		{"SnapshotAfterClearSingle", "test_kv_snapshot_after_clear_single", kvSnapshotAfterClearSingle},
		{"SnapshotAfterClearAll", "test_kv_snapshot_after_clear_all", kvSnapshotAfterClearAll},
		{"ExecutionIDTracking", "test_kv_execution_id_tracking", kvExecutionIDTracking},
		{"CrossExecutionOverwrite", "test_kv_cross_execution_overwrite", kvCrossExecutionOverwrite},
		{"CrossExecutionRemoveReadd", "test_kv_cross_execution_remove_readd", kvCrossExecutionRemoveReadd},
		{"PrunePreservesOverwritten", "test_kv_prune_preserves_overwritten", kvPrunePreservesOverwritten},
		{"PrunePreservesAllKeys", "test_kv_prune_preserves_all_keys", kvPrunePreservesAllKeys},
		{"InstanceIsolation", "test_kv_instance_isolation", kvInstanceIsolation},
		{"DeleteInstanceCascades", "test_kv_delete_instance_cascades", kvDeleteInstanceCascades},
		{"ClearNonexistentKey", "test_kv_clear_nonexistent_key", kvClearNonexistentKey},
		{"GetUnknownInstance", "test_kv_get_unknown_instance", kvGetUnknownInstance},
		{"SetAfterClear", "test_kv_set_after_clear", kvSetAfterClear},
		{"EmptyValue", "test_kv_empty_value", kvEmptyValue},
		{"LargeValue", "test_kv_large_value", kvLargeValue},
		{"SpecialCharsInKey", "test_kv_special_chars_in_key", kvSpecialCharsInKey},
		{"SnapshotEmpty", "test_kv_snapshot_empty", kvSnapshotEmpty},
		{"SnapshotCrossExecution", "test_kv_snapshot_cross_execution", kvSnapshotCrossExecution},
		{"PruneCurrentExecutionProtected", "test_kv_prune_current_execution_protected", kvPruneCurrentExecutionProtected},
		{"DeleteInstanceWithChildren", "test_kv_delete_instance_with_children", kvDeleteInstanceWithChildren},
		{"ClearIsolation", "test_kv_clear_isolation", kvClearIsolation},
		{"DeltaSnapshotExcludesCurrentExecution", "test_kv_delta_snapshot_excludes_current_execution", kvDeltaSnapshotExcludesCurrentExecution},
		{"DeltaSnapshotIncludesCompletedExecution", "test_kv_delta_snapshot_includes_completed_execution", kvDeltaSnapshotIncludesCompletedExecution},
		{"DeltaClientReadsMerged", "test_kv_delta_client_reads_merged", kvDeltaClientReadsMerged},
		{"DeltaTombstoneOverridesStore", "test_kv_delta_tombstone_overrides_store", kvDeltaTombstoneOverridesStore},
		{"DeltaClearAllTombstonesStore", "test_kv_delta_clear_all_tombstones_store", kvDeltaClearAllTombstonesStore},
		{"DeltaMergedOnCompletion", "test_kv_delta_merged_on_completion", kvDeltaMergedOnCompletion},
		{"DeltaMergedOnCan", "test_kv_delta_merged_on_can", kvDeltaMergedOnCan},
		{"DeltaDeleteInstanceCascades", "test_kv_delta_delete_instance_cascades", kvDeltaDeleteInstanceCascades},
		{"DeltaPruneUntouchedKeySurvives", "test_kv_delta_prune_untouched_key_survives", kvDeltaPruneUntouchedKeySurvives},
	}})
}

// ---- KV helpers ----

// kvEvent builds an event of execution exec of instance with the common fields set
// the way duroxide's Event::with_event_id does (no source event, stamped now).
func kvEvent(kind provider.EventKind, instance string, exec, id uint64) provider.Event {
	return provider.Event{Kind: kind, EventID: id, InstanceID: instance, ExecutionID: exec, TimestampMs: time.Now().UnixMilli()}
}

// kvSetEv is a KeyValueSet event.
func kvSetEv(instance string, exec, id uint64, key, value string, updatedAtMs int64) provider.Event {
	ev := kvEvent(provider.EventKeyValueSet, instance, exec, id)
	ev.Key, ev.Value, ev.LastUpdatedAtMs = key, value, updatedAtMs
	return ev
}

// kvClearEv is a KeyValueCleared event.
func kvClearEv(instance string, exec, id uint64, key string) provider.Event {
	ev := kvEvent(provider.EventKeyValueCleared, instance, exec, id)
	ev.Key = key
	return ev
}

// kvClearAllEv is a KeyValuesCleared event.
func kvClearAllEv(instance string, exec, id uint64) provider.Event {
	return kvEvent(provider.EventKeyValuesCleared, instance, exec, id)
}

// kvPokeItem is the external event duroxide's KV tests enqueue to get a turn.
func kvPokeItem(instance string) provider.WorkItem { return externalRaised(instance, "poke", "{}") }

// kvFetchTurn enqueues a poke for instance and fetches it (30s lock).
func kvFetchTurn(t *testing.T, p provider.Provider, instance, what string) *provider.OrchestrationItem {
	t.Helper()
	enqueueOrch(t, p, kvPokeItem(instance), 0)
	item := mustFetchOrch(t, p, longLock, what)
	if item.Instance != instance {
		t.Fatalf("fetched instance %q, want %q (%s)", item.Instance, instance, what)
	}
	return item
}

// kvAckDelta is duroxide's ack_with_delta: poke, fetch, and ack the turn as execution
// exec with delta and empty metadata.
func kvAckDelta(t *testing.T, p provider.Provider, instance string, exec uint64, delta ...provider.Event) {
	t.Helper()
	item := kvFetchTurn(t, p, instance, "the poke of "+instance)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: exec, HistoryDelta: delta})
}

// kvAckEmpty acks a fetched item as execution exec with nothing to commit.
func kvAckEmpty(t *testing.T, p provider.Provider, item *provider.OrchestrationItem, exec uint64) {
	t.Helper()
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: exec})
}

// kvComplete is duroxide's complete_instance: a turn that appends
// OrchestrationCompleted (event 9999) and marks execution exec Completed.
func kvComplete(t *testing.T, p provider.Provider, instance string, exec uint64) {
	t.Helper()
	item := kvFetchTurn(t, p, instance, "the completing turn of "+instance)
	done := kvEvent(provider.EventOrchestrationCompleted, instance, exec, 9999)
	done.Output = "done"
	md := metadata("TestOrch", "1.0.0")
	md.Status, md.Output = ptr(provider.StatusCompleted), ptr("done")
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: exec, HistoryDelta: []provider.Event{done}, Metadata: md})
}

// kvContinueAsNew is duroxide's continue_as_new helper: a turn (no events) that marks
// execution newExec-1 ContinuedAsNew, then a ContinueAsNew message whose turn starts
// execution newExec with OrchestrationStarted.
func kvContinueAsNew(t *testing.T, p provider.Provider, instance string, newExec uint64) {
	t.Helper()
	item := kvFetchTurn(t, p, instance, "the turn marking "+instance+" ContinuedAsNew")
	md := metadata("TestOrch", "1.0.0")
	md.Status = ptr(provider.StatusContinuedAsNew)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: newExec - 1, Metadata: md})

	enqueueOrch(t, p, provider.WorkItem{Kind: provider.WorkContinueAsNew, Instance: instance, Name: "TestOrch",
		Input: "{}", Version: "1.0.0"}, 0)
	item = mustFetchOrch(t, p, longLock, "the ContinueAsNew of "+instance)
	if item.Instance != instance {
		t.Fatalf("fetched instance %q, want %q (ContinueAsNew)", item.Instance, instance)
	}
	started := kvEvent(provider.EventOrchestrationStarted, instance, newExec, 1)
	started.Name, started.Version, started.Input = "TestOrch", "1.0.0", "{}"
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: newExec,
		HistoryDelta: []provider.Event{started}, Metadata: metadata("TestOrch", "1.0.0")})
}

// kvShow renders a value for failure messages, shortening long ones.
func kvShow(v string) string {
	if len(v) > 64 {
		return strconv.Quote(v[:32]) + "… (" + strconv.Itoa(len(v)) + " bytes)"
	}
	return strconv.Quote(v)
}

// kvWant asserts that GetKVValue(instance, key) is present and equal to want.
func kvWant(t *testing.T, p provider.Provider, instance, key, want, why string) {
	t.Helper()
	got, ok, err := p.GetKVValue(t.Context(), instance, key)
	if err != nil {
		t.Fatalf("GetKVValue(%s, %q): %v", instance, key, err)
	}
	if !ok {
		t.Fatalf("GetKVValue(%s, %q) = none; want %s (%s)", instance, key, kvShow(want), why)
	}
	if got != want {
		t.Fatalf("GetKVValue(%s, %q) = %s; want %s (%s)", instance, key, kvShow(got), kvShow(want), why)
	}
}

// kvWantNone asserts that GetKVValue(instance, key) reports no value (and no error).
func kvWantNone(t *testing.T, p provider.Provider, instance, key, why string) {
	t.Helper()
	got, ok, err := p.GetKVValue(t.Context(), instance, key)
	if err != nil {
		t.Fatalf("GetKVValue(%s, %q): %v; want no value and no error", instance, key, err)
	}
	if ok {
		t.Fatalf("GetKVValue(%s, %q) = %s; want none (%s)", instance, key, kvShow(got), why)
	}
}

// kvSnapshotWant asserts that snapshot maps key to want.
func kvSnapshotWant(t *testing.T, snap map[string]provider.KVValue, key, want, why string) {
	t.Helper()
	v, ok := snap[key]
	if !ok {
		t.Fatalf("KVSnapshot has no %q; want %q (%s); snapshot: %v", key, want, why, snap)
	}
	if v.Value != want {
		t.Fatalf("KVSnapshot[%q] = %q; want %q (%s)", key, v.Value, want, why)
	}
}

// kvSnapshotExactly asserts that snapshot's values are exactly want.
func kvSnapshotExactly(t *testing.T, snap map[string]provider.KVValue, want map[string]string, why string) {
	t.Helper()
	got := make(map[string]string, len(snap))
	for k, v := range snap {
		got[k] = v.Value
	}
	if !maps.Equal(got, want) {
		t.Fatalf("KVSnapshot = %v; want exactly %v (%s)", got, want, why)
	}
}

// ---- cases ----

func kvSetAndGet(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-set")
	kvAckDelta(t, p, "kv-set", 1, kvSetEv("kv-set", 1, 100, "counter", "42", 0))
	kvWant(t, p, "kv-set", "counter", "42", "set in the acked delta")
}

func kvOverwrite(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-over")
	kvAckDelta(t, p, "kv-over", 1, kvSetEv("kv-over", 1, 100, "status", "old", 0))
	kvWant(t, p, "kv-over", "status", "old", "initial value")
	kvAckDelta(t, p, "kv-over", 1, kvSetEv("kv-over", 1, 101, "status", "new", 0))
	kvWant(t, p, "kv-over", "status", "new", "overwritten by a later turn")
}

func kvClearSingle(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-clr1")
	kvAckDelta(t, p, "kv-clr1", 1, kvSetEv("kv-clr1", 1, 100, "remove_me", "x", 0))
	kvWant(t, p, "kv-clr1", "remove_me", "x", "set before clearing")
	kvAckDelta(t, p, "kv-clr1", 1, kvClearEv("kv-clr1", 1, 101, "remove_me"))
	kvWantNone(t, p, "kv-clr1", "remove_me", "cleared by KeyValueCleared")
}

func kvClearAllCase(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-clra")
	kvAckDelta(t, p, "kv-clra", 1,
		kvSetEv("kv-clra", 1, 100, "a", "1", 0),
		kvSetEv("kv-clra", 1, 101, "b", "2", 0))
	kvWant(t, p, "kv-clra", "a", "1", "set before clearing")
	kvWant(t, p, "kv-clra", "b", "2", "set before clearing")
	kvAckDelta(t, p, "kv-clra", 1, kvClearAllEv("kv-clra", 1, 102))
	kvWantNone(t, p, "kv-clra", "a", "cleared by KeyValuesCleared")
	kvWantNone(t, p, "kv-clra", "b", "cleared by KeyValuesCleared")
}

func kvGetNonexistent(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-none")
	kvWantNone(t, p, "kv-none", "nope", "never set")
}

func kvSnapshotInFetch(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-fetch")
	kvAckDelta(t, p, "kv-fetch", 1,
		kvSetEv("kv-fetch", 1, 100, "x", "10", 0),
		kvSetEv("kv-fetch", 1, 101, "y", "20", 0))
	kvComplete(t, p, "kv-fetch", 1)

	item := kvFetchTurn(t, p, "kv-fetch", "a turn after completion")
	kvSnapshotExactly(t, item.KVSnapshot, map[string]string{"x": "10", "y": "20"},
		"values of the completed execution are in the snapshot")
	kvAckEmpty(t, p, item, 1)
}

func kvSnapshotAfterClearSingle(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-fclr1")
	kvAckDelta(t, p, "kv-fclr1", 1,
		kvSetEv("kv-fclr1", 1, 100, "keep", "yes", 0),
		kvSetEv("kv-fclr1", 1, 101, "remove", "bye", 0))
	kvAckDelta(t, p, "kv-fclr1", 1, kvClearEv("kv-fclr1", 1, 102, "remove"))
	kvComplete(t, p, "kv-fclr1", 1)

	item := kvFetchTurn(t, p, "kv-fclr1", "a turn after completion")
	kvSnapshotExactly(t, item.KVSnapshot, map[string]string{"keep": "yes"},
		"the cleared key is not in the snapshot")
	kvAckEmpty(t, p, item, 1)
}

func kvSnapshotAfterClearAll(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-fclra")
	kvAckDelta(t, p, "kv-fclra", 1,
		kvSetEv("kv-fclra", 1, 100, "a", "1", 0),
		kvSetEv("kv-fclra", 1, 101, "b", "2", 0))
	kvAckDelta(t, p, "kv-fclra", 1, kvClearAllEv("kv-fclra", 1, 102))

	item := kvFetchTurn(t, p, "kv-fclra", "a turn after clear-all")
	if len(item.KVSnapshot) != 0 {
		t.Fatalf("KVSnapshot = %v; want empty after KeyValuesCleared", item.KVSnapshot)
	}
	kvAckEmpty(t, p, item, 1)
}

func kvExecutionIDTracking(t *testing.T, e penv) {
	p := e.open(t)
	mgmt := e.admin(t, p)
	createInstance(t, p, "kv-exec")
	kvAckDelta(t, p, "kv-exec", 1, kvSetEv("kv-exec", 1, 100, "shared", "from_exec_1", 0))
	kvWant(t, p, "kv-exec", "shared", "from_exec_1", "set in execution 1")

	kvContinueAsNew(t, p, "kv-exec", 2)
	kvAckDelta(t, p, "kv-exec", 2, kvSetEv("kv-exec", 2, 200, "shared", "from_exec_2", 0))
	kvWant(t, p, "kv-exec", "shared", "from_exec_2", "overwritten in execution 2")

	if _, err := mgmt.PruneExecutions(t.Context(), "kv-exec", provider.PruneOptions{KeepLast: 1}); err != nil {
		t.Fatalf("PruneExecutions(kv-exec, keep last 1): %v", err)
	}
	kvWant(t, p, "kv-exec", "shared", "from_exec_2", "the last writer (execution 2) is not pruned")
}

func kvCrossExecutionOverwrite(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-xexec")
	kvAckDelta(t, p, "kv-xexec", 1, kvSetEv("kv-xexec", 1, 100, "k", "v1", 0))
	kvWant(t, p, "kv-xexec", "k", "v1", "set in execution 1")

	kvContinueAsNew(t, p, "kv-xexec", 2)
	kvAckDelta(t, p, "kv-xexec", 2, kvSetEv("kv-xexec", 2, 200, "k", "v2", 0))
	kvWant(t, p, "kv-xexec", "k", "v2", "execution 2 overwrites execution 1's value")
}

func kvCrossExecutionRemoveReadd(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-xrm")
	kvAckDelta(t, p, "kv-xrm", 1, kvSetEv("kv-xrm", 1, 100, "cycle", "exec1", 0))
	kvWant(t, p, "kv-xrm", "cycle", "exec1", "set in execution 1")

	kvContinueAsNew(t, p, "kv-xrm", 2)
	kvAckDelta(t, p, "kv-xrm", 2, kvClearEv("kv-xrm", 2, 200, "cycle"))
	kvWantNone(t, p, "kv-xrm", "cycle", "cleared in execution 2")

	kvContinueAsNew(t, p, "kv-xrm", 3)
	kvAckDelta(t, p, "kv-xrm", 3, kvSetEv("kv-xrm", 3, 300, "cycle", "exec3", 0))
	kvWant(t, p, "kv-xrm", "cycle", "exec3", "set again in execution 3")
}

func kvPrunePreservesOverwritten(t *testing.T, e penv) {
	p := e.open(t)
	mgmt := e.admin(t, p)
	createInstance(t, p, "kv-prn1")
	kvAckDelta(t, p, "kv-prn1", 1, kvSetEv("kv-prn1", 1, 100, "survive", "v1", 0))
	kvContinueAsNew(t, p, "kv-prn1", 2)
	kvAckDelta(t, p, "kv-prn1", 2, kvSetEv("kv-prn1", 2, 200, "survive", "v2", 0))

	if _, err := mgmt.PruneExecutions(t.Context(), "kv-prn1", provider.PruneOptions{KeepLast: 1}); err != nil {
		t.Fatalf("PruneExecutions(kv-prn1, keep last 1): %v", err)
	}
	kvWant(t, p, "kv-prn1", "survive", "v2", "an overwritten key survives pruning of the old execution")
}

func kvPrunePreservesAllKeys(t *testing.T, e penv) {
	p := e.open(t)
	mgmt := e.admin(t, p)
	createInstance(t, p, "kv-prn2")
	kvAckDelta(t, p, "kv-prn2", 1, kvSetEv("kv-prn2", 1, 100, "orphan", "survives", 0))
	kvContinueAsNew(t, p, "kv-prn2", 2)
	kvAckDelta(t, p, "kv-prn2", 2, kvSetEv("kv-prn2", 2, 200, "keeper", "alive", 0))
	kvWant(t, p, "kv-prn2", "orphan", "survives", "set in execution 1, before the prune")
	kvWant(t, p, "kv-prn2", "keeper", "alive", "set in execution 2, before the prune")

	if _, err := mgmt.PruneExecutions(t.Context(), "kv-prn2", provider.PruneOptions{KeepLast: 1}); err != nil {
		t.Fatalf("PruneExecutions(kv-prn2, keep last 1): %v", err)
	}
	kvWant(t, p, "kv-prn2", "orphan", "survives", "KV lives as long as the instance, not the execution that wrote it")
	kvWant(t, p, "kv-prn2", "keeper", "alive", "execution 2's key survives")
}

func kvInstanceIsolation(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-iso-a")
	createInstance(t, p, "kv-iso-b")
	kvAckDelta(t, p, "kv-iso-a", 1, kvSetEv("kv-iso-a", 1, 100, "shared_name", "from_a", 0))
	kvAckDelta(t, p, "kv-iso-b", 1, kvSetEv("kv-iso-b", 1, 100, "shared_name", "from_b", 0))
	kvWant(t, p, "kv-iso-a", "shared_name", "from_a", "instance A's own value")
	kvWant(t, p, "kv-iso-b", "shared_name", "from_b", "instance B's own value")
}

func kvDeleteInstanceCascades(t *testing.T, e penv) {
	p := e.open(t)
	mgmt := e.admin(t, p)
	createInstance(t, p, "kv-del")
	kvAckDelta(t, p, "kv-del", 1, kvSetEv("kv-del", 1, 100, "doomed", "bye", 0))
	kvComplete(t, p, "kv-del", 1)
	kvWant(t, p, "kv-del", "doomed", "bye", "present before deletion")

	if _, err := mgmt.DeleteInstance(t.Context(), "kv-del", false); err != nil {
		t.Fatalf("DeleteInstance(kv-del, force=false) of a completed instance: %v", err)
	}
	kvWantNone(t, p, "kv-del", "doomed", "the instance was deleted")
}

func kvClearNonexistentKey(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-clrne")
	// Clearing a key that was never set must not make the ack fail.
	kvAckDelta(t, p, "kv-clrne", 1, kvClearEv("kv-clrne", 1, 100, "never_existed"))
	kvWantNone(t, p, "kv-clrne", "never_existed", "never set, then cleared")
}

func kvGetUnknownInstance(t *testing.T, e penv) {
	p := e.open(t)
	kvWantNone(t, p, "no-such-instance", "key", "the instance does not exist")
}

func kvSetAfterClear(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-sac")
	kvAckDelta(t, p, "kv-sac", 1,
		kvSetEv("kv-sac", 1, 100, "old_a", "1", 0),
		kvSetEv("kv-sac", 1, 101, "old_b", "2", 0))
	// One turn: clear everything, then set a new key; events apply in order.
	kvAckDelta(t, p, "kv-sac", 1,
		kvClearAllEv("kv-sac", 1, 102),
		kvSetEv("kv-sac", 1, 103, "new_x", "fresh", 0))
	kvWantNone(t, p, "kv-sac", "old_a", "cleared before new_x was set")
	kvWantNone(t, p, "kv-sac", "old_b", "cleared before new_x was set")
	kvWant(t, p, "kv-sac", "new_x", "fresh", "set after the clear-all in the same ack")
}

func kvEmptyValue(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-empty")
	kvAckDelta(t, p, "kv-empty", 1, kvSetEv("kv-empty", 1, 100, "blank", "", 0))
	kvWant(t, p, "kv-empty", "blank", "", "the empty string is a value, not an absence")
}

func kvLargeValue(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-big")
	big := make([]byte, 16*1024)
	for i := range big {
		big[i] = 'x'
	}
	kvAckDelta(t, p, "kv-big", 1, kvSetEv("kv-big", 1, 100, "payload", string(big), 0))
	kvWant(t, p, "kv-big", "payload", string(big), "a 16 KiB value round-trips exactly")
}

func kvSpecialCharsInKey(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-chars")
	pairs := [][2]string{
		{"key with spaces", "v1"},
		{"日本語キー", "v2"},
		{"dotted.key.name", "v3"},
		{"path/like/key", "v4"},
		{"emoji🎉key", "v5"},
	}
	var delta []provider.Event
	for i, kv := range pairs {
		delta = append(delta, kvSetEv("kv-chars", 1, 100+uint64(i), kv[0], kv[1], 0))
	}
	kvAckDelta(t, p, "kv-chars", 1, delta...)
	for _, kv := range pairs {
		kvWant(t, p, "kv-chars", kv[0], kv[1], "keys with spaces, unicode, dots and slashes round-trip")
	}
}

func kvSnapshotEmpty(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-sempty")
	item := kvFetchTurn(t, p, "kv-sempty", "a turn of an instance without KV")
	if len(item.KVSnapshot) != 0 {
		t.Fatalf("KVSnapshot = %v; want empty for an instance that never set a key", item.KVSnapshot)
	}
	kvAckEmpty(t, p, item, 1)
}

func kvSnapshotCrossExecution(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-scross")
	kvAckDelta(t, p, "kv-scross", 1, kvSetEv("kv-scross", 1, 100, "A", "from_exec1", 0))
	kvContinueAsNew(t, p, "kv-scross", 2)
	kvAckDelta(t, p, "kv-scross", 2, kvSetEv("kv-scross", 2, 200, "B", "from_exec2", 0))

	item := kvFetchTurn(t, p, "kv-scross", "a turn of execution 2")
	// A was folded into the stored state when execution 1 continued as new; B belongs
	// to the running execution, which replay rebuilds, so it is not in the snapshot.
	kvSnapshotExactly(t, item.KVSnapshot, map[string]string{"A": "from_exec1"},
		"only state of finished executions is in the snapshot")
	kvAckEmpty(t, p, item, 2)
}

func kvPruneCurrentExecutionProtected(t *testing.T, e penv) {
	p := e.open(t)
	mgmt := e.admin(t, p)
	createInstance(t, p, "kv-prncur")
	kvAckDelta(t, p, "kv-prncur", 1, kvSetEv("kv-prncur", 1, 100, "alive", "yes", 0))

	if _, err := mgmt.PruneExecutions(t.Context(), "kv-prncur", provider.PruneOptions{KeepLast: 1}); err != nil {
		t.Fatalf("PruneExecutions(kv-prncur, keep last 1): %v", err)
	}
	kvWant(t, p, "kv-prncur", "alive", "yes", "the current execution's KV survives pruning")
}

func kvDeleteInstanceWithChildren(t *testing.T, e penv) {
	p := e.open(t)
	mgmt := e.admin(t, p)
	createInstance(t, p, "kv-parent")
	kvAckDelta(t, p, "kv-parent", 1, kvSetEv("kv-parent", 1, 100, "parent_key", "parent_val", 0))

	// Start a child whose parent is kv-parent.
	start := startItem("kv-child", "TestOrch", "1.0.0", "{}")
	start.ParentInstance, start.ParentID = "kv-parent", 1
	enqueueOrch(t, p, start, 0)
	item := mustFetchOrch(t, p, longLock, "the start of kv-child")
	if item.Instance != "kv-child" {
		t.Fatalf("fetched instance %q, want kv-child", item.Instance)
	}
	started := kvEvent(provider.EventOrchestrationStarted, "kv-child", 1, 1)
	started.Name, started.Version, started.Input = "TestOrch", "1.0.0", "{}"
	started.ParentInstance, started.ParentID = "kv-parent", 1
	md := metadata("TestOrch", "1.0.0")
	md.ParentInstanceID = ptr("kv-parent")
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []provider.Event{started}, Metadata: md})

	kvAckDelta(t, p, "kv-child", 1, kvSetEv("kv-child", 1, 100, "child_key", "child_val", 0))

	kvComplete(t, p, "kv-child", 1)
	kvComplete(t, p, "kv-parent", 1)

	if _, err := mgmt.DeleteInstance(t.Context(), "kv-parent", false); err != nil {
		t.Fatalf("DeleteInstance(kv-parent, force=false) of a completed tree: %v", err)
	}
	kvWantNone(t, p, "kv-parent", "parent_key", "the parent was deleted")
	kvWantNone(t, p, "kv-child", "child_key", "deleting the parent deletes the child and its KV")
}

func kvClearIsolation(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-ciso-a")
	createInstance(t, p, "kv-ciso-b")
	kvAckDelta(t, p, "kv-ciso-a", 1, kvSetEv("kv-ciso-a", 1, 100, "shared", "from_a", 0))
	kvAckDelta(t, p, "kv-ciso-b", 1, kvSetEv("kv-ciso-b", 1, 100, "shared", "from_b", 0))
	kvAckDelta(t, p, "kv-ciso-a", 1, kvClearAllEv("kv-ciso-a", 1, 101))
	kvWantNone(t, p, "kv-ciso-a", "shared", "instance A cleared all its keys")
	kvWant(t, p, "kv-ciso-b", "shared", "from_b", "clearing instance A must not affect instance B")
}

func kvDeltaSnapshotExcludesCurrentExecution(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-ds1")
	kvAckDelta(t, p, "kv-ds1", 1, kvSetEv("kv-ds1", 1, 100, "counter", "1", 100))
	kvWant(t, p, "kv-ds1", "counter", "1", "client reads see the running execution's writes")

	item := kvFetchTurn(t, p, "kv-ds1", "a later turn of execution 1")
	if len(item.KVSnapshot) != 0 {
		t.Fatalf("KVSnapshot = %v; want empty: counter was set by the running execution, which replay rebuilds",
			item.KVSnapshot)
	}
	kvAckEmpty(t, p, item, 1)
}

func kvDeltaSnapshotIncludesCompletedExecution(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-ds2")
	kvAckDelta(t, p, "kv-ds2", 1, kvSetEv("kv-ds2", 1, 100, "counter", "5", 100))
	kvContinueAsNew(t, p, "kv-ds2", 2)

	item := kvFetchTurn(t, p, "kv-ds2", "a turn of execution 2")
	kvSnapshotWant(t, item.KVSnapshot, "counter", "5", "execution 1 ended by continuing as new")
	kvAckEmpty(t, p, item, 2)
}

func kvDeltaClientReadsMerged(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-dm")
	kvAckDelta(t, p, "kv-dm", 1,
		kvSetEv("kv-dm", 1, 100, "color", "red", 100),
		kvSetEv("kv-dm", 1, 101, "size", "large", 101))
	kvComplete(t, p, "kv-dm", 1)

	// A turn acked as execution 2 (a restart rather than continue-as-new).
	kvAckDelta(t, p, "kv-dm", 2,
		kvSetEv("kv-dm", 2, 200, "color", "blue", 200),
		kvSetEv("kv-dm", 2, 201, "shape", "circle", 201))

	kvWant(t, p, "kv-dm", "color", "blue", "the running execution's write overrides the stored value")
	kvWant(t, p, "kv-dm", "size", "large", "a stored value shows when the running execution did not touch it")
	kvWant(t, p, "kv-dm", "shape", "circle", "a key only the running execution wrote shows")
}

func kvDeltaTombstoneOverridesStore(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-dt")
	kvAckDelta(t, p, "kv-dt", 1, kvSetEv("kv-dt", 1, 100, "temp", "exists", 100))
	kvComplete(t, p, "kv-dt", 1)
	kvAckDelta(t, p, "kv-dt", 2, kvClearEv("kv-dt", 2, 200, "temp"))
	kvWantNone(t, p, "kv-dt", "temp", "the running execution's clear hides the stored value")
}

func kvDeltaClearAllTombstonesStore(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-dca")
	kvAckDelta(t, p, "kv-dca", 1,
		kvSetEv("kv-dca", 1, 100, "a", "1", 100),
		kvSetEv("kv-dca", 1, 101, "b", "2", 101))
	kvComplete(t, p, "kv-dca", 1)
	kvAckDelta(t, p, "kv-dca", 2,
		kvClearAllEv("kv-dca", 2, 200),
		kvSetEv("kv-dca", 2, 201, "c", "3", 201))
	kvWantNone(t, p, "kv-dca", "a", "clear-all hides stored key a")
	kvWantNone(t, p, "kv-dca", "b", "clear-all hides stored key b")
	kvWant(t, p, "kv-dca", "c", "3", "a key set after the clear-all shows")
}

func kvDeltaMergedOnCompletion(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-dmc")
	kvAckDelta(t, p, "kv-dmc", 1, kvSetEv("kv-dmc", 1, 100, "result", "42", 100))
	kvComplete(t, p, "kv-dmc", 1)
	kvWant(t, p, "kv-dmc", "result", "42", "still readable after the execution completed")
}

func kvDeltaMergedOnCan(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "kv-dmc2")
	kvAckDelta(t, p, "kv-dmc2", 1,
		kvSetEv("kv-dmc2", 1, 100, "version", "1", 100),
		kvSetEv("kv-dmc2", 1, 101, "progress", "50%", 101))
	kvAckDelta(t, p, "kv-dmc2", 1, kvSetEv("kv-dmc2", 1, 102, "progress", "100%", 102))
	kvContinueAsNew(t, p, "kv-dmc2", 2)

	item := kvFetchTurn(t, p, "kv-dmc2", "a turn of execution 2")
	kvSnapshotWant(t, item.KVSnapshot, "version", "1", "carried over by continue-as-new")
	kvSnapshotWant(t, item.KVSnapshot, "progress", "100%", "the latest value is carried over")
	kvAckEmpty(t, p, item, 2)
}

func kvDeltaDeleteInstanceCascades(t *testing.T, e penv) {
	p := e.open(t)
	mgmt := e.admin(t, p)
	createInstance(t, p, "kv-ddel")
	kvAckDelta(t, p, "kv-ddel", 1, kvSetEv("kv-ddel", 1, 100, "data", "important", 100))
	kvWant(t, p, "kv-ddel", "data", "important", "written by the running execution")

	if _, err := mgmt.DeleteInstance(t.Context(), "kv-ddel", true); err != nil {
		t.Fatalf("DeleteInstance(kv-ddel, force=true): %v", err)
	}
	kvWantNone(t, p, "kv-ddel", "data", "the running execution's KV goes with the instance")
}

func kvDeltaPruneUntouchedKeySurvives(t *testing.T, e penv) {
	p := e.open(t)
	mgmt := e.admin(t, p)
	createInstance(t, p, "kv-dprn")
	kvAckDelta(t, p, "kv-dprn", 1, kvSetEv("kv-dprn", 1, 100, "stale_config", "from_exec_1", 100))
	kvContinueAsNew(t, p, "kv-dprn", 2)
	kvAckDelta(t, p, "kv-dprn", 2, kvSetEv("kv-dprn", 2, 200, "other", "unrelated", 200))
	kvContinueAsNew(t, p, "kv-dprn", 3)
	// Execution 3 runs and never touches either key.
	kvWant(t, p, "kv-dprn", "stale_config", "from_exec_1", "before the prune")
	kvWant(t, p, "kv-dprn", "other", "unrelated", "before the prune")

	if _, err := mgmt.PruneExecutions(t.Context(), "kv-dprn", provider.PruneOptions{KeepLast: 1}); err != nil {
		t.Fatalf("PruneExecutions(kv-dprn, keep last 1): %v", err)
	}
	kvWant(t, p, "kv-dprn", "stale_config", "from_exec_1", "a key of pruned execution 1 survives: KV lives as long as the instance")
	kvWant(t, p, "kv-dprn", "other", "unrelated", "a key of pruned execution 2 survives")

	item := kvFetchTurn(t, p, "kv-dprn", "a turn of execution 3")
	kvSnapshotWant(t, item.KVSnapshot, "stale_config", "from_exec_1", "the snapshot keeps keys of pruned executions")
	kvSnapshotWant(t, item.KVSnapshot, "other", "unrelated", "the snapshot keeps keys of pruned executions")
	kvAckEmpty(t, p, item, 3)
}
