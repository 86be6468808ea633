// Port of duroxide's provider validation module instance_creation
// (src/provider_validation/instance_creation.rs, snapshot 0.1.26, commit 58cdc0e).

package conformance

import (
	"testing"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "InstanceCreation", cases: []providerCase{
		{"ViaMetadata", "test_instance_creation_via_metadata", testInstanceCreationViaMetadata},
		{"NoInstanceCreationOnEnqueue", "test_no_instance_creation_on_enqueue", testInstanceCreationNoInstanceCreationOnEnqueue},
		{"NullVersionHandling", "test_null_version_handling", testInstanceCreationNullVersionHandling},
		{"SubOrchestrationInstanceCreation", "test_sub_orchestration_instance_creation", testInstanceCreationSubOrchestrationInstanceCreation},
	}})
}

// icRequire checks the identity an orchestration fetch reports.
func icRequire(t *testing.T, item *provider.OrchestrationItem, what, instance, name string) {
	t.Helper()
	if item.Instance != instance {
		t.Fatalf("%s: fetched instance %q; want %q", what, item.Instance, instance)
	}
	if name != "" && item.OrchestrationName != name {
		t.Fatalf("%s: orchestration name %q; want %q", what, item.OrchestrationName, name)
	}
}

// testInstanceCreationViaMetadata: the first ack's metadata creates the instance;
// later fetches report the version from that metadata, not from the start item.
func testInstanceCreationViaMetadata(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-A"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst+" (no instance yet)")
	icRequire(t, item, "first fetch", inst, "TestOrch")
	if item.ExecutionID != 1 {
		t.Fatalf("first fetch: execution id %d; want 1", item.ExecutionID)
	}
	if len(item.History) != 0 {
		t.Fatalf("first fetch: history has %d events %v; want none", len(item.History), atomKinds(item.History))
	}
	// The version of this first fetch may be empty or taken from the work item.

	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomOn(inst, 1, startedEvent(1, "TestOrch", "2.0.0", "{}"))},
		Metadata:     metadata("TestOrch", "2.0.0"), // the version the runtime resolved
	})

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item2 := mustFetchOrch(t, p, longLock, "the second message of "+inst)
	icRequire(t, item2, "second fetch", inst, "TestOrch")
	if item2.Version != "2.0.0" {
		t.Fatalf("second fetch: version %q; want %q (from the ack's metadata, not the work item's 1.0.0)", item2.Version, "2.0.0")
	}
	if item2.ExecutionID != 1 {
		t.Fatalf("second fetch: execution id %d; want 1", item2.ExecutionID)
	}
	if len(item2.History) != 1 {
		t.Fatalf("second fetch: history has %d events %v; want the OrchestrationStarted", len(item2.History), atomKinds(item2.History))
	}

	ackOrch(t, p, item2.LockToken, provider.OrchestrationAck{ExecutionID: 1})
}

// testInstanceCreationNoInstanceCreationOnEnqueue: enqueueing creates no instance,
// yet its start is fetchable.
func testInstanceCreationNoInstanceCreationOnEnqueue(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-B"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst+", although the instance does not exist yet")
	icRequire(t, item, "fetch", inst, "")

	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomStarted(inst, 1)},
		Metadata:     metadata("TestOrch", "1.0.0"),
	})
}

// testInstanceCreationNullVersionHandling: a start without a version is fetchable and
// the ack's metadata sets the version.
func testInstanceCreationNullVersionHandling(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "instance-C"

	enqueueOrch(t, p, startItem(inst, "TestOrch", "", "{}"), 0) // no version
	item := mustFetchOrch(t, p, longLock, "the version-less start of "+inst)
	icRequire(t, item, "first fetch", inst, "")

	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomOn(inst, 1, startedEvent(1, "TestOrch", "3.0.0", "{}"))},
		Metadata:     metadata("TestOrch", "3.0.0"),
	})

	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item2 := mustFetchOrch(t, p, longLock, "the second message of "+inst)
	if item2.Version != "3.0.0" {
		t.Fatalf("second fetch: version %q; want %q (from the ack's metadata)", item2.Version, "3.0.0")
	}

	ackOrch(t, p, item2.LockToken, provider.OrchestrationAck{ExecutionID: 1})
}

// testInstanceCreationSubOrchestrationInstanceCreation: a child start enqueued by its parent's ack is
// fetchable before the child exists; the child's first ack creates it.
func testInstanceCreationSubOrchestrationInstanceCreation(t *testing.T, e penv) {
	p := e.open(t)
	const parent, child = "parent-instance", "parent-instance::child-instance"

	enqueueOrch(t, p, startItem(parent, "TestOrch", "1.0.0", "{}"), 0)
	pitem := mustFetchOrch(t, p, longLock, "the start of "+parent)
	ackOrch(t, p, pitem.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomOn(parent, 1, startedEvent(1, "ParentOrch", "1.0.0", "{}"))},
		OrchestratorItems: []provider.WorkItem{{
			Kind: provider.WorkStartOrchestration, Instance: child, Name: "ChildOrch", Input: "{}",
			ParentInstance: parent, ParentID: 1, ExecutionID: 1,
		}},
		Metadata: metadata("ParentOrch", "1.0.0"),
	})

	citem := mustFetchOrch(t, p, longLock, "the start of "+child+" (no instance yet)")
	icRequire(t, citem, "child fetch", child, "ChildOrch")

	started := startedEvent(1, "ChildOrch", "1.5.0", "{}")
	started.ParentInstance, started.ParentID = parent, 1
	ackOrch(t, p, citem.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{atomOn(child, 1, started)},
		Metadata:     metadata("ChildOrch", "1.5.0"),
	})

	enqueueOrch(t, p, provider.WorkItem{
		Kind: provider.WorkStartOrchestration, Instance: child, Name: "ChildOrch", Input: "{}", ExecutionID: 1,
	}, 0)
	citem2 := mustFetchOrch(t, p, longLock, "the second message of "+child)
	icRequire(t, citem2, "second child fetch", child, "")
	if citem2.Version != "1.5.0" {
		t.Fatalf("second child fetch: version %q; want %q (from the ack's metadata)", citem2.Version, "1.5.0")
	}

	ackOrch(t, p, citem2.LockToken, provider.OrchestrationAck{ExecutionID: 1})
}
