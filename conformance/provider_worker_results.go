package conformance

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

// The WorkerResults group is duroq's own (duroxide has no such module): a provider
// that acks activities but drops their results failed only
// QueueSemantics/WorkerAckAtomicity. These cases look at what an ack carries to
// the orchestrator from several angles.
func init() {
	registerProviderGroup(providerGroup{name: "WorkerResults", cases: []providerCase{
		{"CompletionReachesOrchestratorIntact", duroqOwn, testWorkerResultsCompletionIntact},
		{"FailureReachesOrchestratorIntact", duroqOwn, testWorkerResultsFailureIntact},
		{"ManyAcksEachDeliverTheirResult", duroqOwn, testWorkerResultsManyAcks},
		{"AckOfLapsedLockDeliversNothing", duroqOwn, testWorkerResultsLapsedAck},
	}})
}

// duroqOwn stands for the duroxide test name of cases that port none.
const duroqOwn = "(duroq's own)"

// wrLeased starts inst, enqueues its activity id named name and fetches it under a
// lock of lock.
func wrLeased(t *testing.T, p provider.Provider, inst string, id uint64, name string, lock time.Duration) *provider.WorkItemLease {
	t.Helper()
	qsStarted(t, p, inst)
	enqueueWork(t, p, activityExecute(inst, 1, id, name, "in"))
	return atomMustFetchWork(t, p, lock, "the activity")
}

// wrMessages fetches inst's orchestration item and returns its messages.
func wrMessages(t *testing.T, p provider.Provider, inst, what string) []provider.WorkItem {
	t.Helper()
	item := mustFetchOrch(t, p, longLock, what)
	if item.Instance != inst {
		t.Fatalf("%s: fetched instance %q; want %q", what, item.Instance, inst)
	}
	return item.Messages
}

// testWorkerResultsCompletionIntact: the completion an ack carries reaches the
// orchestrator once, with its execution, activity id and result.
func testWorkerResultsCompletionIntact(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "results-completion"
	lease := wrLeased(t, p, inst, 7, "Charge", longLock)
	atomAckWork(t, p, lease.LockToken, ptr(activityCompleted(inst, 1, 7, "receipt-42")))

	ms := wrMessages(t, p, inst, "the completion of the acked activity")
	if len(ms) != 1 {
		t.Fatalf("fetched messages %v; want exactly the one completion", atomMessageKinds(ms))
	}
	if m := ms[0]; m.Kind != provider.WorkActivityCompleted || m.ExecutionID != 1 || m.ID != 7 || m.Result != "receipt-42" {
		t.Fatalf("fetched %+v; want ActivityCompleted of execution 1, id 7, result %q", m, "receipt-42")
	}
}

// testWorkerResultsFailureIntact: a failure an ack carries reaches the orchestrator
// with its details.
func testWorkerResultsFailureIntact(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "results-failure"
	lease := wrLeased(t, p, inst, 3, "Ship", longLock)
	details := &provider.ErrorDetails{Kind: provider.ErrorApplication, AppKind: "AppActivityFailed", Message: "carrier down"}
	atomAckWork(t, p, lease.LockToken, &provider.WorkItem{Kind: provider.WorkActivityFailed, Instance: inst, ExecutionID: 1, ID: 3, Details: details})

	ms := wrMessages(t, p, inst, "the failure of the acked activity")
	if len(ms) != 1 || ms[0].Kind != provider.WorkActivityFailed || ms[0].ID != 3 {
		t.Fatalf("fetched messages %+v; want exactly ActivityFailed of id 3", ms)
	}
	if d := ms[0].Details; d == nil || d.Message != "carrier down" || d.Kind != provider.ErrorApplication {
		t.Fatalf("the failure arrived with details %+v; want %+v", d, details)
	}
}

// testWorkerResultsManyAcks: activities acked in any order each deliver their own
// result, once.
func testWorkerResultsManyAcks(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "results-many"
	const n = 5
	qsStarted(t, p, inst)
	for id := uint64(1); id <= n; id++ {
		enqueueWork(t, p, activityExecute(inst, 1, id, "Step", "in"))
	}
	var leases []*provider.WorkItemLease
	for range n {
		leases = append(leases, atomMustFetchWork(t, p, longLock, "one of the activities"))
	}
	for _, l := range slices.Backward(leases) {
		atomAckWork(t, p, l.LockToken, ptr(activityCompleted(inst, 1, l.Item.ID, fmt.Sprintf("r%d", l.Item.ID))))
	}
	atomNoWork(t, p, longLock, "every activity was acked")

	ms := wrMessages(t, p, inst, "the completions of the acked activities")
	got := map[uint64]string{}
	for _, m := range ms {
		if m.Kind != provider.WorkActivityCompleted {
			t.Fatalf("fetched %+v among the completions; want only ActivityCompleted", m)
		}
		if _, dup := got[m.ID]; dup {
			t.Fatalf("the completion of activity %d arrived twice", m.ID)
		}
		got[m.ID] = m.Result
	}
	for id := uint64(1); id <= n; id++ {
		if want := fmt.Sprintf("r%d", id); got[id] != want {
			t.Errorf("activity %d: result %q; want %q (fetched %d completions)", id, got[id], want, len(ms))
		}
	}
}

// testWorkerResultsLapsedAck: an ack whose lock lapsed is refused and delivers no
// result; the activity is offered again.
func testWorkerResultsLapsedAck(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "results-lapsed"
	lease := wrLeased(t, p, inst, 1, "Slow", e.lt())
	time.Sleep(e.lapse())
	err := p.AckWorkItem(t.Context(), lease.LockToken, ptr(activityCompleted(inst, 1, 1, "late")))
	mustFailWith(t, err, provider.ErrLockLost, "ack after the lock lapsed")
	atomNoOrch(t, p, longLock, "a refused ack delivers no result")
	again := atomMustFetchWork(t, p, longLock, "the activity, offered again")
	if again.Item.ID != 1 {
		t.Fatalf("offered again: activity %d; want 1", again.Item.ID)
	}
}
