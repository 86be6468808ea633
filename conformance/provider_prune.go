package conformance

// Port of duroxide's provider validation module prune
// (src/provider_validation/prune.rs, snapshot 0.1.26, commit 58cdc0e).
//
// ProviderAdmin.PruneExecutions and PruneExecutionsBulk remove old executions of
// continue-as-new chains: the current execution is never pruned (KeepLast 0 and 1
// both keep only it), an unknown instance is an error, and bulk prune also covers
// instances whose current execution is still running. duroxide's Option<u32>
// keep_last maps to KeepLast with None and Some(0) both 0.

import (
	"fmt"
	"slices"
	"testing"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "Prune", cases: []providerCase{
		{"OptionsCombinations", "test_prune_options_combinations", testPruneOptionsCombinations},
		{"Safety", "test_prune_safety", testPruneSafety},
		{"Bulk", "test_prune_bulk", testPruneBulk},
		{"BulkIncludesRunningInstances", "test_prune_bulk_includes_running_instances", testPruneBulkIncludesRunning},
	}})
}

// pruneChain builds instance with n executions, as a continue-as-new chain of
// orchestration name: execution 1 from a StartOrchestration, the others from
// ContinueAsNew items; each turn acks its execution's OrchestrationStarted (event 1)
// with status ContinuedAsNew, except the last, which gets lastStatus.
func pruneChain(t *testing.T, p provider.Provider, instance, name string, n uint64, lastStatus string) {
	t.Helper()
	for exec := uint64(1); exec <= n; exec++ {
		status := provider.StatusContinuedAsNew
		if exec == n {
			status = lastStatus
		}
		msg := startItem(instance, "TestOrch", "1.0.0", "{}")
		if exec > 1 {
			msg = provider.WorkItem{Kind: provider.WorkContinueAsNew, Instance: instance, Name: name, Input: "{}", Version: "1.0.0"}
		}
		enqueueOrch(t, p, msg, 0)
		item := mustFetchOrch(t, p, longLock, fmt.Sprintf("the %s that begins execution %d of %s", msg.Kind, exec, instance))
		md := metadata(name, "1.0.0")
		md.Status = ptr(status)
		ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
			ExecutionID:  exec,
			HistoryDelta: []provider.Event{startedEvent(1, name, "1.0.0", "{}")},
			Metadata:     md,
		})
	}
}

// pruneExecutions is ListExecutions that fails the test on error.
func pruneExecutions(t *testing.T, a provider.ProviderAdmin, instance string) []uint64 {
	t.Helper()
	ids, err := a.ListExecutions(t.Context(), instance)
	if err != nil {
		t.Fatalf("ListExecutions(%s): %v", instance, err)
	}
	return ids
}

func pruneInfo(t *testing.T, a provider.ProviderAdmin, instance string) provider.InstanceInfo {
	t.Helper()
	info, err := a.GetInstanceInfo(t.Context(), instance)
	if err != nil {
		t.Fatalf("GetInstanceInfo(%s): %v", instance, err)
	}
	return info
}

func pruneOne(t *testing.T, a provider.ProviderAdmin, instance string, opts provider.PruneOptions) provider.PruneResult {
	t.Helper()
	res, err := a.PruneExecutions(t.Context(), instance, opts)
	if err != nil {
		t.Fatalf("PruneExecutions(%s, %+v): %v", instance, opts, err)
	}
	return res
}

func pruneBulk(t *testing.T, a provider.ProviderAdmin, f provider.InstanceFilter, opts provider.PruneOptions) provider.PruneResult {
	t.Helper()
	res, err := a.PruneExecutionsBulk(t.Context(), f, opts)
	if err != nil {
		t.Fatalf("PruneExecutionsBulk(%+v, %+v): %v", f, opts, err)
	}
	return res
}

func testPruneOptionsCombinations(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const inst = "prune-options-test"
	pruneChain(t, p, inst, "TestOrch", 4, provider.StatusCompleted)
	if ids := pruneExecutions(t, a, inst); len(ids) != 4 {
		t.Fatalf("ListExecutions = %v; want 4 executions", ids)
	}

	res := pruneOne(t, a, inst, provider.PruneOptions{KeepLast: 2})
	if res.InstancesProcessed != 1 {
		t.Fatalf("PruneExecutions(keep last 2) reported %+v; want InstancesProcessed == 1", res)
	}
	ids := pruneExecutions(t, a, inst)
	if len(ids) != 2 {
		t.Fatalf("after PruneExecutions(keep last 2) ListExecutions = %v; want 2 executions", ids)
	}
	if !slices.Contains(ids, 3) && !slices.Contains(ids, 4) {
		t.Fatalf("after PruneExecutions(keep last 2) ListExecutions = %v; want the newest executions kept", ids)
	}

	// Empty options prune every execution but the current one.
	const inst2 = "prune-options-empty"
	pruneChain(t, p, inst2, "TestOrch", 3, provider.StatusCompleted)
	current := pruneInfo(t, a, inst2).CurrentExecutionID
	pruneOne(t, a, inst2, provider.PruneOptions{})
	if ids := pruneExecutions(t, a, inst2); len(ids) != 1 || ids[0] != current {
		t.Fatalf("after PruneExecutions(empty options) ListExecutions = %v; want only the current execution [%d]", ids, current)
	}
}

func testPruneSafety(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)

	const inst = "prune-safety-current"
	pruneChain(t, p, inst, "TestOrch", 3, provider.StatusCompleted)
	pruneOne(t, a, inst, provider.PruneOptions{KeepLast: 0})
	if cur := pruneInfo(t, a, inst).CurrentExecutionID; cur != 3 {
		t.Fatalf("after PruneExecutions(keep last 0) the current execution is %d; want 3 (never pruned)", cur)
	}

	_, err := a.PruneExecutions(t.Context(), "does-not-exist-prune", provider.PruneOptions{KeepLast: 1})
	mustFail(t, err, "PruneExecutions of an unknown instance")

	// For a completed instance, keep_last None, Some(0) and Some(1) all keep exactly
	// the current execution.
	for _, c := range []struct {
		label    string
		keepLast int
	}{{"none", 0}, {"some0", 0}, {"some1", 1}} {
		id := "prune-terminal-" + c.label
		pruneChain(t, p, id, "TestOrch", 4, provider.StatusCompleted)
		info := pruneInfo(t, a, id)
		if info.Status != provider.StatusCompleted {
			t.Fatalf("%s: status %q; want Completed", id, info.Status)
		}
		res := pruneOne(t, a, id, provider.PruneOptions{KeepLast: c.keepLast})
		ids := pruneExecutions(t, a, id)
		if len(ids) != 1 || ids[0] != info.CurrentExecutionID {
			t.Fatalf("%s: after PruneExecutions(keep last %d) ListExecutions = %v; want only the current execution [%d]",
				id, c.keepLast, ids, info.CurrentExecutionID)
		}
		if res.ExecutionsDeleted < 3 {
			t.Fatalf("%s: PruneExecutions(keep last %d) reported %+v; want ExecutionsDeleted >= 3", id, c.keepLast, res)
		}
	}
}

func testPruneBulk(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	for i := range 3 {
		pruneChain(t, p, fmt.Sprintf("prune-bulk-%d", i), "TestOrch", 4, provider.StatusCompleted)
	}

	res := pruneBulk(t, a, provider.InstanceFilter{InstanceIDs: []string{"prune-bulk-0", "prune-bulk-1"}}, provider.PruneOptions{KeepLast: 1})
	if res.InstancesProcessed != 2 {
		t.Fatalf("PruneExecutionsBulk(2 ids, keep last 1) reported %+v; want InstancesProcessed == 2", res)
	}
	if res.ExecutionsDeleted < 4 {
		t.Fatalf("PruneExecutionsBulk(2 ids, keep last 1) reported %+v; want ExecutionsDeleted >= 4", res)
	}
	for _, id := range []string{"prune-bulk-0", "prune-bulk-1"} {
		if ids := pruneExecutions(t, a, id); len(ids) != 1 {
			t.Fatalf("%s: after the bulk prune ListExecutions = %v; want 1 execution", id, ids)
		}
	}
	if ids := pruneExecutions(t, a, "prune-bulk-2"); len(ids) != 4 {
		t.Fatalf("prune-bulk-2 (not in the filter): ListExecutions = %v; want its 4 executions untouched", ids)
	}
}

func testPruneBulkIncludesRunning(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const inst = "prune-running-inst"
	pruneChain(t, p, inst, "LongRunning", 3, provider.StatusRunning)
	if ids := pruneExecutions(t, a, inst); len(ids) != 3 {
		t.Fatalf("ListExecutions = %v; want 3 executions", ids)
	}
	info := pruneInfo(t, a, inst)
	if info.Status != provider.StatusRunning || info.CurrentExecutionID != 3 {
		t.Fatalf("GetInstanceInfo = status %q, current execution %d; want Running, 3", info.Status, info.CurrentExecutionID)
	}

	res := pruneBulk(t, a, provider.InstanceFilter{InstanceIDs: []string{inst}}, provider.PruneOptions{KeepLast: 1})
	if res.InstancesProcessed != 1 || res.ExecutionsDeleted != 2 {
		t.Fatalf("PruneExecutionsBulk(running instance, keep last 1) reported %+v; want InstancesProcessed == 1 and ExecutionsDeleted == 2 (bulk prune must include running instances)", res)
	}
	if ids := pruneExecutions(t, a, inst); len(ids) != 1 || ids[0] != 3 {
		t.Fatalf("after the bulk prune ListExecutions = %v; want only the current execution [3]", ids)
	}
	if st := pruneInfo(t, a, inst).Status; st != provider.StatusRunning {
		t.Fatalf("after the bulk prune the status is %q; want Running", st)
	}
}
