// Port of duroxide's provider validation module multi_execution
// (src/provider_validation/multi_execution.rs, snapshot 0.1.26, commit 58cdc0e).

package conformance

import (
	"fmt"
	"testing"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "MultiExecution", cases: []providerCase{
		{"ExecutionIsolation", "test_execution_isolation", testMultiExecutionExecutionIsolation},
		{"LatestExecutionDetection", "test_latest_execution_detection", testMultiExecutionLatestExecutionDetection},
		{"ExecutionIDSequencing", "test_execution_id_sequencing", testMultiExecutionExecutionIDSequencing},
		{"ContinueAsNewCreatesNewExecution", "test_continue_as_new_creates_new_execution", testMultiExecutionContinueAsNewCreatesNewExecution},
		{"ExecutionHistoryPersistence", "test_execution_history_persistence", testMultiExecutionExecutionHistoryPersistence},
	}})
}

// meStart is a start of "TestOrch" 1.0.0 naming an explicit execution id.
func meStart(instance string, execution uint64) provider.WorkItem {
	item := startItem(instance, "TestOrch", "1.0.0", "{}")
	item.ExecutionID = execution
	return item
}

// meTurn enqueues item, fetches it and acks execution with delta and md.
func meTurn(t *testing.T, p provider.Provider, item provider.WorkItem, execution uint64, md provider.ExecutionMetadata, delta ...provider.Event) {
	t.Helper()
	enqueueOrch(t, p, item, 0)
	got := mustFetchOrch(t, p, longLock, fmt.Sprintf("the %s of %s", item.Kind, item.Instance))
	ackOrch(t, p, got.LockToken, provider.OrchestrationAck{ExecutionID: execution, HistoryDelta: delta, Metadata: md})
}

// meReadExecution is ReadWithExecution that fails the test on error.
func meReadExecution(t *testing.T, p provider.Provider, instance string, execution uint64) []provider.Event {
	t.Helper()
	h, err := p.ReadWithExecution(t.Context(), instance, execution)
	if err != nil {
		t.Fatalf("ReadWithExecution(%s, %d): %v", instance, execution, err)
	}
	return h
}

// meRequireOneScheduled requires that h is exactly one ActivityScheduled named name.
func meRequireOneScheduled(t *testing.T, h []provider.Event, what, name string) {
	t.Helper()
	atomRequireKinds(t, h, what, provider.EventActivityScheduled)
	if h[0].Name != name {
		t.Fatalf("%s: ActivityScheduled is named %q; want %q", what, h[0].Name, name)
	}
}

// testMultiExecutionExecutionIsolation: each execution keeps its own history; Read
// returns the latest one's.
func testMultiExecutionExecutionIsolation(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	meTurn(t, p, meStart(inst, 1), 1, provider.ExecutionMetadata{},
		atomStarted(inst, 1),
		atomOn(inst, 1, activityScheduled(2, "Activity1", "input1")),
		atomOn(inst, 1, provider.Event{Kind: provider.EventOrchestrationCompleted, EventID: 3, Output: "result1"}),
	)
	meTurn(t, p, meStart(inst, 2), 2, provider.ExecutionMetadata{},
		atomStarted(inst, 2),
		atomOn(inst, 2, provider.Event{Kind: provider.EventOrchestrationCompleted, EventID: 2, Output: "result2"}),
	)

	atomRequireKinds(t, meReadExecution(t, p, inst, 1), "execution 1",
		provider.EventOrchestrationStarted, provider.EventActivityScheduled, provider.EventOrchestrationCompleted)
	atomRequireKinds(t, meReadExecution(t, p, inst, 2), "execution 2",
		provider.EventOrchestrationStarted, provider.EventOrchestrationCompleted)
	atomRequireKinds(t, readHistory(t, p, inst), "Read (latest execution)",
		provider.EventOrchestrationStarted, provider.EventOrchestrationCompleted)
}

// testMultiExecutionLatestExecutionDetection: Read returns execution 2's history,
// ReadWithExecution(1) execution 1's.
func testMultiExecutionLatestExecutionDetection(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	meTurn(t, p, meStart(inst, 1), 1, provider.ExecutionMetadata{}, atomOn(inst, 1, activityScheduled(1, "A", "")))
	meTurn(t, p, meStart(inst, 2), 2, provider.ExecutionMetadata{}, atomOn(inst, 2, activityScheduled(1, "B", "")))

	meRequireOneScheduled(t, readHistory(t, p, inst), "Read (latest execution)", "B")
	meRequireOneScheduled(t, meReadExecution(t, p, inst, 1), "execution 1", "A")
}

// testMultiExecutionExecutionIDSequencing: an ack with execution id 2 advances the
// instance's current execution, which later fetches report.
func testMultiExecutionExecutionIDSequencing(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, meStart(inst, 1), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)
	if item.ExecutionID != 1 {
		t.Fatalf("first fetch: execution id %d; want 1", item.ExecutionID)
	}
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomStarted(inst, 1)},
		Metadata:     metadata("TestOrch", "1.0.0"),
	})

	// The fetch reports the instance's current execution (still 1); the ack names 2.
	meTurn(t, p, meStart(inst, 2), 2, metadata("TestOrch", "1.0.0"), atomStarted(inst, 2))

	enqueueOrch(t, p, meStart(inst, 3), 0)
	item3 := mustFetchOrch(t, p, longLock, "the third message of "+inst)
	if item3.ExecutionID != 2 {
		t.Fatalf("fetch after the execution-2 ack: execution id %d; want 2 (the current execution)", item3.ExecutionID)
	}
}

// testMultiExecutionContinueAsNewCreatesNewExecution: acking a ContinueAsNew turn with
// execution id 2 makes execution 2 current: the next fetch is execution 2's, with
// its own history, and execution 1 keeps its own.
func testMultiExecutionContinueAsNewCreatesNewExecution(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	meTurn(t, p, meStart(inst, 1), 1, provider.ExecutionMetadata{}, atomStarted(inst, 1))

	can := provider.WorkItem{Kind: provider.WorkContinueAsNew, Instance: inst, Name: "TestOrch", Input: "new-input", Version: "1.0.0"}
	meTurn(t, p, can, 2, provider.ExecutionMetadata{},
		atomOn(inst, 2, startedEvent(1, "TestOrch", "1.0.0", "new-input")))

	// duroxide checks the execution id only if something is left to fetch; a message
	// raised after the continue-as-new makes sure something is.
	enqueueOrch(t, p, provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: inst, Name: "go", Data: "after"}, 0)
	item := mustFetchOrch(t, p, longLock, "an event raised after the continue-as-new")
	if item.ExecutionID != 2 {
		t.Fatalf("fetch after continue-as-new: execution id %d; want 2", item.ExecutionID)
	}
	atomRequireKinds(t, item.History, "the fetched history of execution 2", provider.EventOrchestrationStarted)
	if item.History[0].Input != "new-input" {
		t.Fatalf("execution 2 started with input %q; want the continue-as-new's %q", item.History[0].Input, "new-input")
	}
	atomRequireKinds(t, meReadExecution(t, p, inst, 1), "execution 1, kept apart", provider.EventOrchestrationStarted)
}

// testMultiExecutionExecutionHistoryPersistence: three executions keep independent
// histories.
func testMultiExecutionExecutionHistoryPersistence(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	for x := uint64(1); x <= 3; x++ {
		meTurn(t, p, meStart(inst, x), x, provider.ExecutionMetadata{},
			atomOn(inst, x, activityScheduled(1, fmt.Sprintf("Activity-%d", x), fmt.Sprintf("input-%d", x))))
	}
	for x := uint64(1); x <= 3; x++ {
		meRequireOneScheduled(t, meReadExecution(t, p, inst, x), fmt.Sprintf("execution %d", x), fmt.Sprintf("Activity-%d", x))
	}
	meRequireOneScheduled(t, readHistory(t, p, inst), "Read (latest execution)", "Activity-3")
}
