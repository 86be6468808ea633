package conformance

// Port of duroxide's provider validation module management
// (src/provider_validation/management.rs, snapshot 0.1.26, commit 58cdc0e), plus the
// six get_instance_stats tests duroxide added to the module in 0.1.27 (anchor §4.20).
//
// The first seven cases read instances back through ProviderAdmin (listing, instance
// and execution info, metrics, queue depths); the GetInstanceStats cases check the
// per-instance statistics of the current execution: history size, carried-forward
// messages (QueuePendingCount) and KV counted over the merged store+delta view.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "Management", cases: []providerCase{
		{"ListInstances", "test_list_instances", testMgmtListInstances},
		{"ListInstancesByStatus", "test_list_instances_by_status", testMgmtListInstancesByStatus},
		{"ListExecutions", "test_list_executions", testMgmtListExecutions},
		{"GetInstanceInfo", "test_get_instance_info", testMgmtGetInstanceInfo},
		{"GetExecutionInfo", "test_get_execution_info", testMgmtGetExecutionInfo},
		{"GetSystemMetrics", "test_get_system_metrics", testMgmtGetSystemMetrics},
		{"GetQueueDepths", "test_get_queue_depths", testMgmtGetQueueDepths},
		// Added in duroxide 0.1.27.
		{"GetInstanceStatsNonexistent", "test_get_instance_stats_nonexistent", testMgmtStatsNonexistent},
		{"GetInstanceStatsHistory", "test_get_instance_stats_history", testMgmtStatsHistory},
		{"GetInstanceStatsKV", "test_get_instance_stats_kv", testMgmtStatsKV},
		{"GetInstanceStatsCarryForward", "test_get_instance_stats_carry_forward", testMgmtStatsCarryForward},
		{"GetInstanceStatsKVDeltaOnly", "test_get_instance_stats_kv_delta_only", testMgmtStatsKVDeltaOnly},
		{"GetInstanceStatsKVMerged", "test_get_instance_stats_kv_merged", testMgmtStatsKVMerged},
		// duroq's own: paged listing for operators (issue 18).
		{"ListInstancePagesThroughFilters", duroqOwn, testMgmtListInstancePages},
		{"ListInstancePageRefusesBadQueries", duroqOwn, testMgmtListInstancePageBadQuery},
		{"AckRecordingNothingLeavesUpdatedAt", duroqOwn, testMgmtAckRecordingNothing},
		// duroq's own: what operators' dashboards watch (issue 19).
		{"QueueDepthsReportTheOldestReadyMessage", duroqOwn, testMgmtQueueDepthsOldestReady},
	}})
}

// mgmtStartTurn enqueues the start of instance (TestOrch 1.0.0), fetches it and acks
// execution 1 with delta and md.
func mgmtStartTurn(t *testing.T, p provider.Provider, instance string, delta []provider.Event, md provider.ExecutionMetadata) {
	t.Helper()
	enqueueOrch(t, p, startItem(instance, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+instance)
	if item.Instance != instance {
		t.Fatalf("fetched instance %q, want %q", item.Instance, instance)
	}
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: 1, HistoryDelta: delta, Metadata: md})
}

// mgmtPokeTurn enqueues an external event named name for instance, fetches the turn
// and acks execution 1 with delta and md.
func mgmtPokeTurn(t *testing.T, p provider.Provider, instance, name string, delta []provider.Event, md provider.ExecutionMetadata) {
	t.Helper()
	enqueueOrch(t, p, externalRaised(instance, name, "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the "+name+" turn of "+instance)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: 1, HistoryDelta: delta, Metadata: md})
}

// mgmtStats is GetInstanceStats that requires the instance to exist.
func mgmtStats(t *testing.T, p provider.Provider, instance string) provider.SystemStats {
	t.Helper()
	s, err := p.GetInstanceStats(t.Context(), instance)
	if err != nil {
		t.Fatalf("GetInstanceStats(%s): %v", instance, err)
	}
	if s == nil {
		t.Fatalf("GetInstanceStats(%s) = nil; want the stats of an existing instance", instance)
	}
	return *s
}

func mgmtKVSet(id uint64, key, value string, updatedAtMs int64) provider.Event {
	return provider.Event{Kind: provider.EventKeyValueSet, EventID: id, Key: key, Value: value, LastUpdatedAtMs: updatedAtMs}
}

func mgmtCompleted(id uint64) provider.Event {
	return provider.Event{Kind: provider.EventOrchestrationCompleted, EventID: id, Output: "done"}
}

func mgmtCompletedMeta() provider.ExecutionMetadata {
	return provider.ExecutionMetadata{Status: ptr(provider.StatusCompleted), Output: ptr("done")}
}

func testMgmtListInstances(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	for i := range 3 {
		createInstance(t, p, fmt.Sprintf("mgmt-inst-%d", i))
	}
	ids, err := a.ListInstances(t.Context())
	if err != nil {
		t.Fatalf("ListInstances: %v", err)
	}
	if len(ids) < 3 {
		t.Fatalf("ListInstances = %q; want at least the 3 created instances", ids)
	}
	for i := range 3 {
		if id := fmt.Sprintf("mgmt-inst-%d", i); !slices.Contains(ids, id) {
			t.Fatalf("ListInstances = %q; missing %q", ids, id)
		}
	}
}

func testMgmtListInstancesByStatus(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	md := metadata("TestOrch", "1.0.0")
	md.Status, md.Output = ptr(provider.StatusCompleted), ptr("done")
	mgmtStartTurn(t, p, "mgmt-completed", []provider.Event{startedEvent(1, "TestOrch", "1.0.0", "{}")}, md)

	ids, err := a.ListInstancesByStatus(t.Context(), provider.StatusCompleted)
	if err != nil {
		t.Fatalf("ListInstancesByStatus(Completed): %v", err)
	}
	if !slices.Contains(ids, "mgmt-completed") {
		t.Fatalf("ListInstancesByStatus(Completed) = %q; want it to include mgmt-completed", ids)
	}
}

func testMgmtListExecutions(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	mgmtStartTurn(t, p, "mgmt-multi-exec", []provider.Event{startedEvent(1, "TestOrch", "1.0.0", "{}")}, provider.ExecutionMetadata{})

	ids, err := a.ListExecutions(t.Context(), "mgmt-multi-exec")
	if err != nil {
		t.Fatalf("ListExecutions: %v", err)
	}
	if !slices.Contains(ids, 1) {
		t.Fatalf("ListExecutions = %v; want it to include execution 1", ids)
	}
}

func testMgmtGetInstanceInfo(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	// The start item names TestOrch 1.0.0; the ack's metadata wins.
	mgmtStartTurn(t, p, "mgmt-info", []provider.Event{startedEvent(1, "InfoOrch", "2.0.0", "test")}, metadata("InfoOrch", "2.0.0"))

	info, err := a.GetInstanceInfo(t.Context(), "mgmt-info")
	if err != nil {
		t.Fatalf("GetInstanceInfo: %v", err)
	}
	if info.InstanceID != "mgmt-info" || info.OrchestrationName != "InfoOrch" ||
		info.OrchestrationVersion != "2.0.0" || info.CurrentExecutionID != 1 {
		t.Fatalf("GetInstanceInfo = %+v; want instance mgmt-info, name InfoOrch, version 2.0.0 (from the ack metadata), current execution 1", info)
	}
}

func testMgmtGetExecutionInfo(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	mgmtStartTurn(t, p, "mgmt-exec-info", []provider.Event{startedEvent(1, "TestOrch", "1.0.0", "{}")},
		provider.ExecutionMetadata{Status: ptr(provider.StatusCompleted), Output: ptr("result")})

	info, err := a.GetExecutionInfo(t.Context(), "mgmt-exec-info", 1)
	if err != nil {
		t.Fatalf("GetExecutionInfo: %v", err)
	}
	if info.ExecutionID != 1 || info.Status != provider.StatusCompleted || info.Output == nil || *info.Output != "result" {
		t.Fatalf("GetExecutionInfo = %+v (output %v); want execution 1, status Completed, output \"result\"", info, mgmtDeref(info.Output))
	}
}

func testMgmtGetSystemMetrics(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	base, err := a.GetSystemMetrics(t.Context())
	if err != nil {
		t.Fatalf("GetSystemMetrics: %v", err)
	}
	mgmtStartTurn(t, p, "mgmt-metrics", []provider.Event{startedEvent(1, "TestOrch", "1.0.0", "{}")}, metadata("TestOrch", "1.0.0"))
	m, err := a.GetSystemMetrics(t.Context())
	if err != nil {
		t.Fatalf("GetSystemMetrics: %v", err)
	}
	if m.TotalInstances <= base.TotalInstances {
		t.Fatalf("GetSystemMetrics after creating an instance = %+v; want TotalInstances above %d", m, base.TotalInstances)
	}
	if m.TotalEvents == 0 {
		t.Fatalf("GetSystemMetrics after creating an instance = %+v; want TotalEvents > 0", m)
	}
}

func testMgmtGetQueueDepths(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	base, err := a.GetQueueDepths(t.Context())
	if err != nil {
		t.Fatalf("GetQueueDepths: %v", err)
	}
	enqueueOrch(t, p, startItem("mgmt-queue", "TestOrch", "1.0.0", "{}"), 0)
	d, err := a.GetQueueDepths(t.Context())
	if err != nil {
		t.Fatalf("GetQueueDepths: %v", err)
	}
	if d.OrchestratorQueue <= base.OrchestratorQueue {
		t.Fatalf("GetQueueDepths after an enqueue = %+v; want OrchestratorQueue above %d", d, base.OrchestratorQueue)
	}
}

func testMgmtQueueDepthsOldestReady(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	depths := func() provider.QueueDepths {
		t.Helper()
		d, err := a.GetQueueDepths(t.Context())
		if err != nil {
			t.Fatalf("GetQueueDepths: %v", err)
		}
		return d
	}
	if d := depths(); !d.OrchestratorOldestReady.IsZero() || !d.WorkerOldestReady.IsZero() {
		t.Fatalf("GetQueueDepths of empty queues = %+v; want no oldest ready message", d)
	}
	before := time.Now()
	enqueueOrch(t, p, startItem("mgmt-oldest", "TestOrch", "1.0.0", "{}"), 0)
	enqueueOrch(t, p, startItem("mgmt-later", "TestOrch", "1.0.0", "{}"), time.Hour)
	after := time.Now()
	d := depths()
	if o := d.OrchestratorOldestReady; o.Before(before.Add(-time.Second)) || o.After(after.Add(time.Second)) || !d.WorkerOldestReady.IsZero() {
		t.Fatalf("GetQueueDepths after a start was enqueued between %v and %v = %+v; want it as the orchestrator queue's oldest ready message, and no worker message",
			before, after, d)
	}
	mustFetchOrch(t, p, longLock, "the start of mgmt-oldest")
	if d := depths(); !d.OrchestratorOldestReady.IsZero() {
		t.Fatalf("GetQueueDepths while the only ready message is locked = %+v; want no oldest ready message (the delayed one is not ready)", d)
	}
}

func testMgmtStatsNonexistent(t *testing.T, e penv) {
	p := e.open(t)
	s, err := p.GetInstanceStats(t.Context(), "no-such-instance")
	if err != nil {
		t.Fatalf("GetInstanceStats(unknown): %v", err)
	}
	if s != nil {
		t.Fatalf("GetInstanceStats(unknown) = %+v; want nil", *s)
	}
}

func testMgmtStatsHistory(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "stats-hist")
	s := mgmtStats(t, p, "stats-hist")
	if s.HistoryEventCount < 1 || s.HistorySizeBytes == 0 {
		t.Fatalf("GetInstanceStats = %+v; want at least 1 history event of non-zero size", s)
	}
	if s.KVUserKeyCount != 0 || s.KVTotalValueBytes != 0 || s.QueuePendingCount != 0 {
		t.Fatalf("GetInstanceStats = %+v; want no KV keys, no KV bytes and no carried-forward messages", s)
	}
}

func testMgmtStatsKV(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "stats-kv"
	createInstance(t, p, inst)
	// Completing the execution merges its KV writes into the stored state.
	mgmtPokeTurn(t, p, inst, "poke", []provider.Event{
		mgmtKVSet(100, "k1", "aaa", 0),
		mgmtKVSet(101, "k2", "bbbbb", 0),
		mgmtCompleted(102),
	}, mgmtCompletedMeta())

	s := mgmtStats(t, p, inst)
	if s.KVUserKeyCount != 2 || s.KVTotalValueBytes != 8 {
		t.Fatalf("GetInstanceStats = %+v; want 2 KV keys and 8 value bytes (3 + 5)", s)
	}
}

func testMgmtStatsCarryForward(t *testing.T, e penv) {
	p := e.open(t)
	started := startedEvent(provider.InitialEventID, "TestOrch", "1.0.0", "{}")
	started.CarryForward = []provider.NameData{
		{Name: "raised-1", Data: `{"data":"a"}`},
		{Name: "raised-2", Data: `{"data":"b"}`},
		{Name: "raised-3", Data: `{"data":"c"}`},
	}
	mgmtStartTurn(t, p, "cf-stats", []provider.Event{started}, metadata("TestOrch", "1.0.0"))

	s := mgmtStats(t, p, "cf-stats")
	if s.QueuePendingCount != 3 {
		t.Fatalf("GetInstanceStats = %+v; want QueuePendingCount 3 (the carried-forward messages of OrchestrationStarted)", s)
	}
	if s.HistoryEventCount < 1 || s.HistorySizeBytes == 0 || s.KVUserKeyCount != 0 {
		t.Fatalf("GetInstanceStats = %+v; want at least 1 history event of non-zero size and no KV keys", s)
	}
}

func testMgmtStatsKVDeltaOnly(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "kv-delta-stats"
	createInstance(t, p, inst)
	// No status: the instance stays running and its KV writes exist only as the
	// current execution's delta.
	mgmtPokeTurn(t, p, inst, "poke", []provider.Event{
		mgmtKVSet(100, "dk1", "xxx", 0),
		mgmtKVSet(101, "dk2", "yyyyyy", 0),
		activityScheduled(102, "Noop", "{}"),
	}, provider.ExecutionMetadata{})

	s := mgmtStats(t, p, inst)
	if s.KVUserKeyCount != 2 || s.KVTotalValueBytes != 9 || s.QueuePendingCount != 0 {
		t.Fatalf("GetInstanceStats = %+v; want 2 KV keys and 9 value bytes (3 + 6) from the delta, no carried-forward messages", s)
	}
}

func testMgmtStatsKVMerged(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "kv-merged-stats"
	createInstance(t, p, inst)

	// Turn 1 writes two keys and stays running.
	mgmtPokeTurn(t, p, inst, "poke1", []provider.Event{
		mgmtKVSet(100, "mk1", "aaa", 0),
		mgmtKVSet(101, "mk2", "bb", 0),
		activityScheduled(102, "Noop", "{}"),
	}, provider.ExecutionMetadata{})
	s := mgmtStats(t, p, inst)
	if s.KVUserKeyCount != 2 || s.KVTotalValueBytes != 5 {
		t.Fatalf("GetInstanceStats after turn 1 = %+v; want 2 KV keys and 5 value bytes (3 + 2)", s)
	}

	// Turn 2 overwrites mk1 and completes, which merges the delta into the store.
	mgmtPokeTurn(t, p, inst, "poke2", []provider.Event{
		mgmtKVSet(200, "mk1", "zzzzz", 1),
		mgmtCompleted(201),
	}, mgmtCompletedMeta())
	s = mgmtStats(t, p, inst)
	if s.KVUserKeyCount != 2 || s.KVTotalValueBytes != 7 || s.QueuePendingCount != 0 {
		t.Fatalf("GetInstanceStats after the completing turn = %+v; want 2 KV keys (overwritten, not duplicated) and 7 value bytes (5 + 2), no carried-forward messages", s)
	}
}

// mgmtDeref renders an optional string for messages.
func mgmtDeref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// testMgmtListInstancePages pages through instances with filters: every selected
// instance once, in id order, described as GetInstanceInfo describes it, with Next
// empty on the last page.
func testMgmtListInstancePages(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	for i := range 7 {
		id, name := fmt.Sprintf("page-%02d", i), "Checkout"
		if i%3 == 2 {
			name = "Refund"
		}
		md := metadata(name, "1.0.0")
		delta := []provider.Event{startedEvent(1, name, "1.0.0", "{}")}
		if i%2 == 0 {
			md.Status, md.Output = ptr(provider.StatusCompleted), ptr("done")
			delta = append(delta, mgmtCompleted(2))
		}
		enqueueOrch(t, p, startItem(id, name, "1.0.0", "{}"), 0)
		item := mustFetchOrch(t, p, longLock, "the start of "+id)
		ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: 1, HistoryDelta: delta, Metadata: md})
	}
	createInstance(t, p, "pagf-other") // sorts right after the prefix "page-"
	pages := func(q provider.InstanceQuery) (ids []string, sizes []int) {
		t.Helper()
		for range 20 {
			page, err := a.ListInstancePage(t.Context(), q)
			if err != nil {
				t.Fatalf("ListInstancePage(%+v): %v", q, err)
			}
			sizes = append(sizes, len(page.Instances))
			for _, info := range page.Instances {
				want, err := a.GetInstanceInfo(t.Context(), info.InstanceID)
				if err != nil || info.InstanceID != want.InstanceID || info.OrchestrationName != want.OrchestrationName ||
					info.Status != want.Status || info.CurrentExecutionID != want.CurrentExecutionID || !info.CreatedAt.Equal(want.CreatedAt) {
					t.Fatalf("listed %+v; GetInstanceInfo says %+v, %v", info, want, err)
				}
				ids = append(ids, info.InstanceID)
			}
			if page.Next == "" {
				return ids, sizes
			}
			if len(page.Instances) == 0 || page.Next != page.Instances[len(page.Instances)-1].InstanceID {
				t.Fatalf("page %+v: Next must be the last id listed", page)
			}
			q.After = page.Next
		}
		t.Fatalf("paging %+v did not end: %q", q, ids)
		return nil, nil
	}
	all := []string{"page-00", "page-01", "page-02", "page-03", "page-04", "page-05", "page-06"}
	if ids, sizes := pages(provider.InstanceQuery{IDPrefix: "page-", Limit: 3}); !slices.Equal(ids, all) || !slices.Equal(sizes, []int{3, 3, 1}) {
		t.Fatalf("pages of 3 of the prefix listed %q in pages of %v; want %q in pages of [3 3 1]", ids, sizes, all)
	}
	if ids, _ := pages(provider.InstanceQuery{IDPrefix: "page-", Status: provider.StatusCompleted}); !slices.Equal(ids, []string{"page-00", "page-02", "page-04", "page-06"}) {
		t.Fatalf("completed instances: %q", ids)
	}
	if ids, _ := pages(provider.InstanceQuery{IDPrefix: "page-", Orchestration: "Refund", Limit: 1}); !slices.Equal(ids, []string{"page-02", "page-05"}) {
		t.Fatalf("Refund instances: %q", ids)
	}
	if ids, _ := pages(provider.InstanceQuery{IDPrefix: "page-", Status: provider.StatusRunning, Orchestration: "Checkout"}); !slices.Equal(ids, []string{"page-01", "page-03"}) {
		t.Fatalf("running Checkout instances: %q", ids)
	}
}

func testMgmtListInstancePageBadQuery(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	_, err := a.ListInstancePage(t.Context(), provider.InstanceQuery{Limit: -1})
	if !errors.Is(err, provider.ErrInvalid) || provider.IsRetryable(err) {
		t.Fatalf("ListInstancePage(Limit -1) = %v; want a permanent ErrInvalid", err)
	}
	_, err = a.ListInstancePage(t.Context(), provider.InstanceQuery{IDPrefix: strings.Repeat("x", 1<<20)})
	if !errors.Is(err, provider.ErrInvalid) || provider.IsRetryable(err) {
		t.Fatalf("ListInstancePage(1 MiB prefix) = %.200v; want a permanent ErrInvalid", err)
	}
	if len(err.Error()) > 4096 {
		t.Fatalf("the error of a 1 MiB prefix is %d bytes long; errors must not echo oversized input", len(err.Error()))
	}
}

// testMgmtAckRecordingNothingLeavesUpdatedAt: a turn that records nothing (a late
// timer or event dropped for an ended execution) is not a change of the instance, so
// listing by UpdatedAt finds instances by when they last changed.
func testMgmtAckRecordingNothing(t *testing.T, e penv) {
	p := e.open(t)
	a := e.admin(t, p)
	md := metadata("TestOrch", "1.0.0")
	md.Status, md.Output = ptr(provider.StatusCompleted), ptr("done")
	mgmtStartTurn(t, p, "mgmt-quiet", []provider.Event{startedEvent(1, "TestOrch", "1.0.0", "{}"), mgmtCompleted(2)}, md)
	before, err := a.GetInstanceInfo(t.Context(), "mgmt-quiet")
	if err != nil {
		t.Fatalf("GetInstanceInfo: %v", err)
	}
	mgmtPokeTurn(t, p, "mgmt-quiet", "late", nil, provider.ExecutionMetadata{})
	after, err := a.GetInstanceInfo(t.Context(), "mgmt-quiet")
	if err != nil {
		t.Fatalf("GetInstanceInfo after the empty turn: %v", err)
	}
	if !after.UpdatedAt.Equal(before.UpdatedAt) || after.Status != provider.StatusCompleted {
		t.Fatalf("an ack that recorded nothing changed the instance: UpdatedAt %v -> %v, status %s", before.UpdatedAt, after.UpdatedAt, after.Status)
	}
}
