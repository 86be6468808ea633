// Port of duroxide's provider validation module error_handling
// (src/provider_validation/error_handling.rs, snapshot 0.1.26, commit 58cdc0e),
// plus the two cases added upstream in 0.1.27 (test_read_corrupted_history_returns_error,
// test_read_with_execution_corrupted_history_returns_error; duroxide-anchor.md §4.20).

package conformance

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "ErrorHandling", cases: []providerCase{
		{"InvalidLockTokenOnAck", "test_invalid_lock_token_on_ack", testErrorHandlingInvalidLockTokenOnAck},
		{"DuplicateEventIDRejection", "test_duplicate_event_id_rejection", testErrorHandlingDuplicateEventIDRejection},
		{"MissingInstanceMetadata", "test_missing_instance_metadata", testErrorHandlingMissingInstanceMetadata},
		{"CorruptedSerializationData", "test_corrupted_serialization_data", testErrorHandlingCorruptedSerializationData},
		{"LockExpirationDuringAck", "test_lock_expiration_during_ack", testErrorHandlingLockExpirationDuringAck},
		// Added upstream in 0.1.27.
		{"ReadCorruptedHistoryReturnsError", "test_read_corrupted_history_returns_error", testErrorHandlingReadCorruptedHistoryReturnsError},
		{"ReadWithExecutionCorruptedHistoryReturnsError", "test_read_with_execution_corrupted_history_returns_error", testErrorHandlingReadWithExecutionCorruptedHistoryReturnsError},
	}})
}

// ehCorruptHook returns the factory's CorruptInstanceHistory hook or skips.
func ehCorruptHook(t *testing.T, e penv) func(t *testing.T, p provider.Provider, instance string) {
	t.Helper()
	capNeedCorrupt(t, e)
	return e.f.CorruptInstanceHistory
}

// ehRequireCorruptError requires that err reports undecodable history as a permanent
// error (duroxide 0.1.27: "deserialisation failures must surface as permanent errors,
// not be skipped").
func ehRequireCorruptError(t *testing.T, err error, events []provider.Event, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s of a corrupted history succeeded with %d events %v; want an error", what, len(events), atomKinds(events))
	}
	mustFailWith(t, err, provider.ErrCorruptHistory, what+" of a corrupted history")
	if provider.IsRetryable(err) {
		t.Fatalf("%s of a corrupted history: error %v is retryable; want a permanent error", what, err)
	}
}

// testErrorHandlingInvalidLockTokenOnAck: an ack with an unknown token is rejected as a lost lock.
func testErrorHandlingInvalidLockTokenOnAck(t *testing.T, e penv) {
	p := e.open(t)
	err := p.AckOrchestrationItem(t.Context(), "invalid-token", provider.OrchestrationAck{ExecutionID: 1})
	mustFailWith(t, err, provider.ErrLockLost, "ack with token \"invalid-token\"")
	if err.Error() == "" {
		t.Fatal("the error of an ack with an unknown token has an empty message")
	}
}

// testErrorHandlingDuplicateEventIDRejection: appending an existing event id fails and leaves
// the history unchanged.
func testErrorHandlingDuplicateEventIDRejection(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomStarted(inst, 1)},
	})

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item2 := mustFetchOrch(t, p, longLock, "the second message of "+inst)
	err := p.AckOrchestrationItem(t.Context(), item2.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomOn(inst, 1, activityScheduled(1, "Activity", "{}"))}, // id 1 again
	})
	mustFailWith(t, err, provider.ErrDuplicateEvent, "ack appending a duplicate event id 1")

	h := readHistory(t, p, inst)
	atomRequireKinds(t, h, "history after the rejected ack", provider.EventOrchestrationStarted)
}

// testErrorHandlingMissingInstanceMetadata: reading a never-created instance gives an empty
// history, not an error.
func testErrorHandlingMissingInstanceMetadata(t *testing.T, e penv) {
	p := e.open(t)
	if h := readHistory(t, p, "non-existent-instance"); len(h) != 0 {
		t.Fatalf("Read of an unknown instance returned %d events %v; want none", len(h), atomKinds(h))
	}
}

// testErrorHandlingCorruptedSerializationData: duroxide's smoke test only fetches
// (any result accepted). Here an instance's stored history is made undecodable
// first: a fetch with a message for it neither fails nor panics but hands the
// instance over locked, with HistoryError set and no events, and another instance
// is still fetched as usual beside it.
func testErrorHandlingCorruptedSerializationData(t *testing.T, e penv) {
	corrupt := ehCorruptHook(t, e)
	p := e.open(t)
	const bad, good = "inst-corrupt-data", "inst-healthy"
	createInstance(t, p, bad)
	corrupt(t, p, bad)
	enqueueOrch(t, p, provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: bad, Name: "go", Data: "x"}, 0)
	enqueueOrch(t, p, startItem(good, "TestOrch", "1.0.0", "{}"), 0)

	got := map[string]*provider.OrchestrationItem{}
	for range 2 {
		item := mustFetchOrch(t, p, longLock, "the corrupted and the healthy instance")
		got[item.Instance] = item
	}
	if item := got[bad]; item == nil {
		t.Fatalf("fetched %v; want %s (corrupted) among them", slices.Collect(maps.Keys(got)), bad)
	} else if item.HistoryError == "" || len(item.History) != 0 {
		t.Fatalf("%s: HistoryError %q with %d events; want the decoding error and no events", bad, item.HistoryError, len(item.History))
	}
	if item := got[good]; item == nil || item.HistoryError != "" {
		t.Fatalf("the healthy instance: %+v; want it fetched as usual", item)
	}
	if item := fetchOrch(t, p, longLock); item != nil {
		t.Fatalf("a third fetch returned %s; want nothing (both instances are locked)", item.Instance)
	}
}

// testErrorHandlingLockExpirationDuringAck: an ack after the lock lapsed is rejected.
func testErrorHandlingLockExpirationDuringAck(t *testing.T, e penv) {
	t.Parallel()
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, e.lt(), "the start of "+inst)

	time.Sleep(e.lapse())

	err := p.AckOrchestrationItem(t.Context(), item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomStarted(inst, 1)},
	})
	mustFailWith(t, err, provider.ErrLockLost, "ack after the lock lapsed")
}

// testErrorHandlingReadCorruptedHistoryReturnsError (0.1.27): Read of an undecodable history
// fails instead of skipping the bad events.
func testErrorHandlingReadCorruptedHistoryReturnsError(t *testing.T, e penv) {
	corrupt := ehCorruptHook(t, e)
	p := e.open(t)
	const inst = "inst-read-corrupt"

	createInstance(t, p, inst)
	if h := readHistory(t, p, inst); len(h) == 0 {
		t.Fatal("Read before the corruption returned no events; want the OrchestrationStarted")
	}

	corrupt(t, p, inst)

	h, err := p.Read(t.Context(), inst)
	ehRequireCorruptError(t, err, h, "Read")
}

// testErrorHandlingReadWithExecutionCorruptedHistoryReturnsError (0.1.27): ReadWithExecution
// (and, when offered, the management ReadHistoryWithExecutionID) of an undecodable
// history fails instead of skipping the bad events.
func testErrorHandlingReadWithExecutionCorruptedHistoryReturnsError(t *testing.T, e penv) {
	corrupt := ehCorruptHook(t, e)
	p := e.open(t)
	const inst = "inst-rwe-corrupt"

	createInstance(t, p, inst)
	h, err := p.ReadWithExecution(t.Context(), inst, provider.InitialExecutionID)
	if err != nil {
		t.Fatalf("ReadWithExecution before the corruption: %v", err)
	}
	if len(h) == 0 {
		t.Fatal("ReadWithExecution before the corruption returned no events; want the OrchestrationStarted")
	}

	corrupt(t, p, inst)

	h, err = p.ReadWithExecution(t.Context(), inst, provider.InitialExecutionID)
	ehRequireCorruptError(t, err, h, "ReadWithExecution")

	if m, ok := p.(provider.ManagedProvider); ok {
		h, err = m.Management().ReadHistoryWithExecutionID(t.Context(), inst, provider.InitialExecutionID)
		ehRequireCorruptError(t, err, h, "ProviderAdmin.ReadHistoryWithExecutionID")
	}
}
