package conformance

// Port of duroxide's provider validation module custom_status
// (src/provider_validation/custom_status.rs, snapshot 0.1.26, commit 58cdc0e).
//
// A provider derives an instance's custom status from the last CustomStatusUpdated
// event of an ack's history delta (nil Status clears it); every ack carrying one bumps
// the instance's custom status version by 1, and GetCustomStatus reports the status
// only when its version is above the caller's lastSeen. duroxide's Some((status,
// version)) is changed == true here, its None changed == false.

import (
	"testing"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "CustomStatus", cases: []providerCase{
		{"Set", "test_custom_status_set", testCSSet},
		{"Clear", "test_custom_status_clear", testCSClear},
		{"NonePreserves", "test_custom_status_none_preserves", testCSNonePreserves},
		{"VersionIncrements", "test_custom_status_version_increments", testCSVersionIncrements},
		{"PollingNoChange", "test_custom_status_polling_no_change", testCSPollingNoChange},
		{"NonexistentInstance", "test_custom_status_nonexistent_instance", testCSNonexistentInstance},
		{"DefaultOnNewInstance", "test_custom_status_default_on_new_instance", testCSDefaultOnNewInstance},
	}})
}

// csTurn pokes instance with an external event, fetches the turn and acks execution 1
// with delta and empty metadata (duroxide's poke_item + ack_with_metadata).
func csTurn(t *testing.T, p provider.Provider, instance string, delta ...provider.Event) {
	t.Helper()
	enqueueOrch(t, p, externalRaised(instance, "poke", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the poke of "+instance)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: 1, HistoryDelta: delta})
}

// csUpdated is a CustomStatusUpdated event; a nil status clears.
func csUpdated(id uint64, status *string) provider.Event {
	return provider.Event{Kind: provider.EventCustomStatusUpdated, EventID: id, Status: status}
}

// csGet is GetCustomStatus that fails the test on error.
func csGet(t *testing.T, p provider.Provider, instance string, lastSeen uint64) (*string, uint64, bool) {
	t.Helper()
	status, version, changed, err := p.GetCustomStatus(t.Context(), instance, lastSeen)
	if err != nil {
		t.Fatalf("GetCustomStatus(%s, %d): %v", instance, lastSeen, err)
	}
	return status, version, changed
}

// csWant requires GetCustomStatus(instance, 0) to report a change to status at version.
func csWant(t *testing.T, p provider.Provider, instance string, status *string, version uint64, why string) {
	t.Helper()
	got, v, changed := csGet(t, p, instance, 0)
	if !changed || v != version || !csEqual(got, status) {
		t.Fatalf("GetCustomStatus(%s, 0) = (%s, %d, changed=%v); want (%s, %d, changed=true): %s",
			instance, csShow(got), v, changed, csShow(status), version, why)
	}
}

func csEqual(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func csShow(s *string) string {
	if s == nil {
		return "nil"
	}
	return "\"" + *s + "\""
}

func testCSSet(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "cs-set")
	csTurn(t, p, "cs-set", csUpdated(100, ptr("progress")))
	csWant(t, p, "cs-set", ptr("progress"), 1, "one ack set the custom status")
}

func testCSClear(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "cs-clear")
	csTurn(t, p, "cs-clear", csUpdated(100, ptr("temp")))
	csWant(t, p, "cs-clear", ptr("temp"), 1, "one ack set the custom status")
	csTurn(t, p, "cs-clear", csUpdated(101, nil))
	csWant(t, p, "cs-clear", nil, 2, "clearing moves the version, so the cleared status is reported")
}

func testCSNonePreserves(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "cs-noop")
	csTurn(t, p, "cs-noop", csUpdated(100, ptr("keep-me")))
	csTurn(t, p, "cs-noop") // no CustomStatusUpdated event
	csWant(t, p, "cs-noop", ptr("keep-me"), 1, "an ack without a CustomStatusUpdated event changes neither the status nor its version")
}

func testCSVersionIncrements(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "cs-ver")
	csTurn(t, p, "cs-ver", csUpdated(100, ptr("a")))
	csWant(t, p, "cs-ver", ptr("a"), 1, "first set")
	csTurn(t, p, "cs-ver", csUpdated(101, ptr("b")))
	csWant(t, p, "cs-ver", ptr("b"), 2, "second set")
	csTurn(t, p, "cs-ver", csUpdated(102, nil))
	csWant(t, p, "cs-ver", nil, 3, "clear")
}

func testCSPollingNoChange(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "cs-poll")
	csTurn(t, p, "cs-poll", csUpdated(100, ptr("v1")))
	if s, v, changed := csGet(t, p, "cs-poll", 1); changed {
		t.Fatalf("GetCustomStatus(cs-poll, 1) = (%s, %d, changed=true); want no change: the version is still 1", csShow(s), v)
	}
	if _, _, changed := csGet(t, p, "cs-poll", 0); !changed {
		t.Fatal("GetCustomStatus(cs-poll, 0) reported no change; want a change: version 1 > 0")
	}
}

func testCSNonexistentInstance(t *testing.T, e penv) {
	p := e.open(t)
	if s, v, changed := csGet(t, p, "does-not-exist", 0); changed {
		t.Fatalf("GetCustomStatus(unknown, 0) = (%s, %d, changed=true); want no change and no error", csShow(s), v)
	}
}

func testCSDefaultOnNewInstance(t *testing.T, e penv) {
	p := e.open(t)
	createInstance(t, p, "cs-default")
	if s, v, changed := csGet(t, p, "cs-default", 0); changed {
		t.Fatalf("GetCustomStatus(new instance, 0) = (%s, %d, changed=true); want no change: a new instance's version is 0", csShow(s), v)
	}
}
