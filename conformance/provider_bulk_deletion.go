package conformance

// Port of duroxide's provider validation module bulk_deletion
// (src/provider_validation/bulk_deletion.rs, snapshot 0.1.26, commit 58cdc0e).
//
// ProviderAdmin.DeleteInstanceBulk: filter criteria (ids, completed-before, limit) are
// ANDed, running instances are skipped silently, and each selected root cascades to
// its descendants, which count in InstancesDeleted. The case names drop the
// delete_instance_bulk_ prefix all four duroxide tests share.

import (
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "BulkDeletion", cases: []providerCase{
		{"FilterCombinations", "test_delete_instance_bulk_filter_combinations", testBulkFilterCombinations},
		{"SafetyAndLimits", "test_delete_instance_bulk_safety_and_limits", testBulkSafetyAndLimits},
		{"CompletedBeforeFilter", "test_delete_instance_bulk_completed_before_filter", testBulkCompletedBeforeFilter},
		{"CascadesToChildren", "test_delete_instance_bulk_cascades_to_children", testBulkCascadesToChildren},
	}})
}

// bulkDelete is DeleteInstanceBulk that fails the test on error.
func bulkDelete(t *testing.T, a provider.ProviderAdmin, f provider.InstanceFilter) provider.DeleteInstanceResult {
	t.Helper()
	res, err := a.DeleteInstanceBulk(t.Context(), f)
	if err != nil {
		t.Fatalf("DeleteInstanceBulk(%+v): %v", f, err)
	}
	return res
}

func testBulkFilterCombinations(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	for _, id := range []string{"bulk-del-filter-0", "bulk-del-filter-1", "bulk-del-filter-2", "bulk-del-filter-3", "bulk-del-filter-4"} {
		delCompleted(t, p, id)
	}

	res := bulkDelete(t, a, provider.InstanceFilter{InstanceIDs: []string{"bulk-del-filter-0", "bulk-del-filter-1"}})
	if res.InstancesDeleted != 2 {
		t.Fatalf("DeleteInstanceBulk(ids 0,1) reported %+v; want InstancesDeleted == 2", res)
	}
	delMustBeGone(t, a, "bulk-del-filter-0", "it was deleted by id")
	delMustBeGone(t, a, "bulk-del-filter-1", "it was deleted by id")
	delMustExist(t, a, "bulk-del-filter-2", "it was not in the id filter")

	res = bulkDelete(t, a, provider.InstanceFilter{InstanceIDs: []string{"does-not-exist-1", "does-not-exist-2"}})
	if res.InstancesDeleted != 0 {
		t.Fatalf("DeleteInstanceBulk(unknown ids) reported %+v; want InstancesDeleted == 0", res)
	}

	res = bulkDelete(t, a, provider.InstanceFilter{})
	if res.InstancesDeleted < 3 {
		t.Fatalf("DeleteInstanceBulk(empty filter) reported %+v; want the remaining 3 terminal instances deleted", res)
	}
	for _, id := range []string{"bulk-del-filter-2", "bulk-del-filter-3", "bulk-del-filter-4"} {
		delMustBeGone(t, a, id, "an empty filter deletes every terminal instance")
	}
}

func testBulkSafetyAndLimits(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	delCompleted(t, p, "bulk-del-safe-completed-1")
	delCompleted(t, p, "bulk-del-safe-completed-2")
	createInstance(t, p, "bulk-del-safe-running-1")
	createInstance(t, p, "bulk-del-safe-running-2")

	res := bulkDelete(t, a, provider.InstanceFilter{InstanceIDs: []string{
		"bulk-del-safe-completed-1", "bulk-del-safe-completed-2", "bulk-del-safe-running-1", "bulk-del-safe-running-2"}})
	if res.InstancesDeleted != 2 {
		t.Fatalf("DeleteInstanceBulk(2 completed + 2 running) reported %+v; want InstancesDeleted == 2 (running ones skipped)", res)
	}
	delMustExist(t, a, "bulk-del-safe-running-1", "bulk delete skips running instances")
	delMustExist(t, a, "bulk-del-safe-running-2", "bulk delete skips running instances")

	// Iterative batching: 4 more terminal instances, deleted 2 at a time.
	for _, id := range []string{"bulk-del-batch-0", "bulk-del-batch-1", "bulk-del-batch-2", "bulk-del-batch-3"} {
		delCompleted(t, p, id)
	}
	for i, want := range []uint64{2, 2, 0} {
		res := bulkDelete(t, a, provider.InstanceFilter{Limit: 2})
		if res.InstancesDeleted != want {
			t.Fatalf("DeleteInstanceBulk(limit 2), batch %d, reported %+v; want InstancesDeleted == %d", i+1, res, want)
		}
	}
}

func testBulkCompletedBeforeFilter(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	a := e.admin(t, p)
	ids := []string{"bulk-del-time-1", "bulk-del-time-2"}

	// The sleeps keep millisecond-precision completion times clear of the cut-offs.
	before := time.Now()
	time.Sleep(10 * time.Millisecond)
	for _, id := range ids {
		delCompleted(t, p, id)
	}
	time.Sleep(10 * time.Millisecond)
	after := time.Now()

	res := bulkDelete(t, a, provider.InstanceFilter{InstanceIDs: ids, CompletedBefore: before})
	if res.InstancesDeleted != 0 {
		t.Fatalf("DeleteInstanceBulk(completed before a time preceding their completion) reported %+v; want InstancesDeleted == 0", res)
	}
	for _, id := range ids {
		delMustExist(t, a, id, "it completed after the cut-off")
	}

	res = bulkDelete(t, a, provider.InstanceFilter{InstanceIDs: ids, CompletedBefore: after})
	if res.InstancesDeleted != 2 {
		t.Fatalf("DeleteInstanceBulk(completed before a time following their completion) reported %+v; want InstancesDeleted == 2", res)
	}
	for _, id := range ids {
		delMustBeGone(t, a, id, "it completed before the cut-off")
	}
}

func testBulkCascadesToChildren(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	const parent1, parent2, standalone = "bulk-del-cascade-parent1", "bulk-del-cascade-parent2", "bulk-del-cascade-standalone"
	delCompleted(t, p, parent1)
	delCompletedChild(t, p, "bulk-del-cascade-child1", parent1)
	delCompleted(t, p, parent2)
	for _, c := range []string{"bulk-del-cascade-child2a", "bulk-del-cascade-child2b", "bulk-del-cascade-child2c"} {
		delCompletedChild(t, p, c, parent2)
	}
	delCompleted(t, p, standalone)
	all := []string{parent1, "bulk-del-cascade-child1", parent2, "bulk-del-cascade-child2a",
		"bulk-del-cascade-child2b", "bulk-del-cascade-child2c", standalone}
	for _, id := range all {
		delMustExist(t, a, id, "it was just created")
	}

	res := bulkDelete(t, a, provider.InstanceFilter{InstanceIDs: []string{parent1, parent2, standalone}})
	if res.InstancesDeleted != 7 {
		t.Fatalf("DeleteInstanceBulk(3 roots) reported %+v; want InstancesDeleted == 7 (3 roots + 4 cascaded children)", res)
	}
	for _, id := range all {
		delMustBeGone(t, a, id, "its root was bulk-deleted")
	}
}
