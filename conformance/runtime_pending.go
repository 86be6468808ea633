package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// The Pending state (issue 14): a started instance whose first turn has not
// committed reads Pending, not NotFound, and says why when runtimes gave its start
// back. Providers without provider.PendingStartReader keep NotFound, as documented.
func init() {
	registerRuntimeGroup(runtimeGroup{name: "Pending", cases: []runtimeCase{
		{"StartedButNotRunIsPending", rtPendingStartedButNotRun},
		{"ProviderKeepsWhyAStartWasGivenBack", rtPendingProviderKeepsWhy},
		{"RefusedStartSaysWhyThenRuns", rtPendingRefusedStartSaysWhy},
	}})
}

// pendingReader returns the provider's PendingStartReader, or nil after checking
// that without one a queued start reads NotFound.
func pendingReader(t *testing.T, r *rig, instance string) provider.PendingStartReader {
	t.Helper()
	pr, ok := r.P.(provider.PendingStartReader)
	if !ok {
		if st := pendingStatus(t, r, instance); st.State != runtime.StateNotFound {
			t.Fatalf("a provider without provider.PendingStartReader reports %+v for a queued start; want NotFound", st)
		}
	}
	return pr
}

func pendingStatus(t *testing.T, r *rig, instance string) runtime.OrchestrationStatus {
	t.Helper()
	st, err := r.C.Status(context.Background(), instance)
	if err != nil {
		t.Fatalf("status %s: %v", instance, err)
	}
	return st
}

// pendingStart is PendingStart that fails the test on error.
func pendingStart(t *testing.T, pr provider.PendingStartReader, instance string) *provider.PendingStart {
	t.Helper()
	ps, err := pr.PendingStart(context.Background(), instance)
	if err != nil {
		t.Fatalf("PendingStart(%s): %v", instance, err)
	}
	return ps
}

// With no runtime at all, a start reads Pending at once, with the name and version
// asked for; Pending is not terminal, so a wait goes on.
func rtPendingStartedButNotRun(t *testing.T, e renv) {
	r := e.rig(t)
	if err := r.C.StartOrchestrationVersioned(context.Background(), "pend-1", "Checkout", "2.0.0", "cart"); err != nil {
		t.Fatal(err)
	}
	if pendingReader(t, r, "pend-1") == nil {
		return
	}
	st := pendingStatus(t, r, "pend-1")
	if st.State != runtime.StatePending || st.Name != "Checkout" || st.Version != "2.0.0" || st.PendingReason != "" || st.Terminal() {
		t.Fatalf("status of a start no runtime took: %+v; want Pending Checkout 2.0.0 without a reason", st)
	}
	if st := pendingStatus(t, r, "pend-nobody"); st.State != runtime.StateNotFound {
		t.Fatalf("status of an instance never started: %+v; want NotFound", st)
	}
	// Other messages queued for an instance that was never started do not make it
	// Pending: only a start does.
	if err := r.C.RaiseEvent(context.Background(), "pend-ghost", "Go", "x"); err != nil {
		t.Fatal(err)
	}
	if st := pendingStatus(t, r, "pend-ghost"); st.State != runtime.StateNotFound {
		t.Fatalf("status of an instance with only an event queued: %+v; want NotFound", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if st, err := r.C.WaitForOrchestration(ctx, "pend-1"); !errors.Is(err, context.DeadlineExceeded) || st.State != runtime.StatePending {
		t.Fatalf("WaitForOrchestration of a Pending instance = %+v, %v; want it to wait until the deadline", st, err)
	}
}

// The provider half: PendingStart sees the start behind other messages, locked or
// not, counts its attempts, and keeps the reason a ReasonAbandoner was given — not
// the reason of a release that was not a failure — and the abandon still lets the
// instance's later messages through at once, as AbandonOrchestrationItem does.
func rtPendingProviderKeepsWhy(t *testing.T, e renv) {
	r := e.rig(t)
	ctx := context.Background()
	// An event raced ahead of its start: the start is not the first message.
	enqueueOrch(t, r.P, externalRaised("pend-why", "Go", "x"), 0)
	enqueueOrch(t, r.P, startItem("pend-why", "Checkout", "2.0.0", "cart"), 0)
	pr := pendingReader(t, r, "pend-why")
	ra, ok := r.P.(provider.ReasonAbandoner)
	if pr == nil || !ok {
		t.Skip("the provider does not implement both provider.PendingStartReader and provider.ReasonAbandoner")
	}
	if ps := pendingStart(t, pr, "pend-nobody"); ps != nil {
		t.Fatalf("PendingStart of an instance never started: %+v; want nil", ps)
	}
	ps := pendingStart(t, pr, "pend-why")
	if ps == nil || ps.Name != "Checkout" || ps.Version != "2.0.0" || ps.Attempts != 0 || ps.LastError != "" || ps.EnqueuedAt.IsZero() {
		t.Fatalf("PendingStart of a queued start: %+v; want Checkout 2.0.0, never attempted, with its enqueue time", ps)
	}

	item := mustFetchOrch(t, r.P, longLock, "the start of pend-why")
	if ps := pendingStart(t, pr, "pend-why"); ps == nil || ps.Attempts != 1 {
		t.Fatalf("PendingStart while a runtime holds the start: %+v; want it, attempted once", ps)
	}
	const why = `orchestration "Checkout" version "2.0.0" is not registered on runtime node-a`
	if err := ra.AbandonOrchestrationItemWithReason(ctx, item.LockToken, 0, false, why); err != nil {
		t.Fatalf("AbandonOrchestrationItemWithReason: %v", err)
	}
	if ps := pendingStart(t, pr, "pend-why"); ps == nil || ps.Attempts != 1 || ps.LastError != why {
		t.Fatalf("PendingStart after an abandon with a reason: %+v; want attempt 1 and LastError %q", ps, why)
	}
	st := pendingStatus(t, r, "pend-why")
	if want := why + " (offered 1 time)"; st.State != runtime.StatePending || st.Name != "Checkout" || st.PendingReason != want {
		t.Fatalf("status after a runtime gave the start back: %+v; want Pending with reason %q", st, want)
	}

	// A release that is not the message's fault records nothing.
	item = mustFetchOrch(t, r.P, longLock, "the start of pend-why again")
	if err := ra.AbandonOrchestrationItemWithReason(ctx, item.LockToken, 0, true, "shutting down"); err != nil {
		t.Fatalf("AbandonOrchestrationItemWithReason(ignoreAttempt): %v", err)
	}
	if ps := pendingStart(t, pr, "pend-why"); ps == nil || ps.Attempts != 1 || ps.LastError != why {
		t.Fatalf("PendingStart after an abandon with ignoreAttempt: %+v; want attempt 1 and the earlier reason kept", ps)
	}

	// A long reason is kept bounded.
	item = mustFetchOrch(t, r.P, longLock, "the start of pend-why a third time")
	if err := ra.AbandonOrchestrationItemWithReason(ctx, item.LockToken, 0, false, strings.Repeat("é", 1<<20)); err != nil {
		t.Fatalf("AbandonOrchestrationItemWithReason(1 MiB reason): %v", err)
	}
	if st := pendingStatus(t, r, "pend-why"); st.State != runtime.StatePending || len(st.PendingReason) > 4096 ||
		!strings.HasPrefix(st.PendingReason, "éé") || !strings.HasSuffix(st.PendingReason, "(offered 2 times)") {
		t.Fatalf("status after a 1 MiB reason: %s, reason of %d bytes ending %q; want Pending with a bounded reason",
			st.State, len(st.PendingReason), st.PendingReason[max(0, len(st.PendingReason)-40):])
	}

	// Once the first turn commits, the instance is Running and no start is pending.
	item = mustFetchOrch(t, r.P, longLock, "the start of pend-why a fourth time")
	ackOrch(t, r.P, item.LockToken, provider.OrchestrationAck{ExecutionID: provider.InitialExecutionID,
		HistoryDelta: []provider.Event{startedEvent(1, "Checkout", "2.0.0", "cart")}, Metadata: metadata("Checkout", "2.0.0")})
	if ps := pendingStart(t, pr, "pend-why"); ps != nil {
		t.Fatalf("PendingStart after the first turn committed: %+v; want nil", ps)
	}
	if st := pendingStatus(t, r, "pend-why"); st.State != runtime.StateRunning || st.PendingReason != "" {
		t.Fatalf("status after the first turn committed: %+v; want Running", st)
	}

	// The abandon lets the instance go at once, as AbandonOrchestrationItem does: a
	// message that arrives while the given-back one waits out its delay is delivered.
	enqueueOrch(t, r.P, externalRaised("pend-why", "First", "1"), 0)
	item = mustFetchOrch(t, r.P, longLock, "the first event of pend-why")
	if err := ra.AbandonOrchestrationItemWithReason(ctx, item.LockToken, time.Hour, false, "later"); err != nil {
		t.Fatalf("AbandonOrchestrationItemWithReason(delay): %v", err)
	}
	enqueueOrch(t, r.P, externalRaised("pend-why", "Second", "2"), 0)
	item = mustFetchOrch(t, r.P, longLock, "the second event of pend-why, past the delayed first")
	if len(item.Messages) != 1 || item.Messages[0].Name != "Second" {
		t.Fatalf("fetched %+v; want only the Second event (the First waits out its delay)", item.Messages)
	}
}

// End to end: a runtime without the orchestration gives its start back, saying so;
// the instance reads Pending with that reason until a runtime that has it runs it.
func rtPendingRefusedStartSaysWhy(t *testing.T, e renv) {
	r := e.rig(t)
	if err := r.C.StartOrchestration(context.Background(), "pend-refused", "Checkout", "cart"); err != nil {
		t.Fatal(err)
	}
	if pendingReader(t, r, "pend-refused") == nil {
		return
	}
	generous := func(o *runtime.Options) {
		o.MaxAttempts = 1000 // refusals must not poison the start in this test
		o.UnregisteredBackoff = 10 * time.Millisecond
		o.WorkerNodeID = "node-without-checkout"
	}
	old := r.startFast(newRegistry(t).orch("Other", func(*runtime.Context, string) (string, error) { return "", nil }).Registry, generous)
	var st runtime.OrchestrationStatus
	eventually(t, "Status to say why the runtime without Checkout gave its start back", func() bool {
		st = pendingStatus(t, r, "pend-refused")
		if st.State != runtime.StatePending {
			t.Fatalf("status while only a runtime without Checkout runs: %+v; want Pending", st)
		}
		return st.PendingReason != ""
	})
	for _, want := range []string{`"Checkout"`, "not registered", "node-without-checkout", "(offered "} {
		if !strings.Contains(st.PendingReason, want) {
			t.Fatalf("PendingReason %q does not contain %q", st.PendingReason, want)
		}
	}
	if st.Name != "Checkout" {
		t.Fatalf("status %+v; want the name asked for", st)
	}
	old.stop()

	r.startFast(newRegistry(t).orch("Checkout", func(_ *runtime.Context, in string) (string, error) { return "paid " + in, nil }).Registry)
	completed(t, r.wait("pend-refused"), "paid cart")
	if st := pendingStatus(t, r, "pend-refused"); st.PendingReason != "" {
		t.Fatalf("a completed instance still has a PendingReason: %+v", st)
	}
}
