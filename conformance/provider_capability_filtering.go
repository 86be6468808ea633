// Port of duroxide's provider validation module capability_filtering
// (src/provider_validation/capability_filtering.rs, snapshot 0.1.26, commit 58cdc0e):
// fetching orchestration items filtered by the pinned runtime version of the current
// execution, storing pinned versions through the ack metadata, and the handling of
// history that cannot be decoded.
package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "CapabilityFiltering", cases: []providerCase{
		{"FetchWithFilterNoneReturnsAnyItem", "test_fetch_with_filter_none_returns_any_item", capFetchWithFilterNoneReturnsAnyItem},
		{"FetchWithCompatibleFilterReturnsItem", "test_fetch_with_compatible_filter_returns_item", capFetchWithCompatibleFilterReturnsItem},
		{"FetchWithIncompatibleFilterSkipsItem", "test_fetch_with_incompatible_filter_skips_item", capFetchWithIncompatibleFilterSkipsItem},
		{"FetchFilterSkipsIncompatibleSelectsCompatible", "test_fetch_filter_skips_incompatible_selects_compatible", capFetchFilterSkipsIncompatibleSelectsCompatible},
		{"FetchFilterDoesNotLockSkippedInstances", "test_fetch_filter_does_not_lock_skipped_instances", capFetchFilterDoesNotLockSkippedInstances},
		{"FetchFilterNullPinnedVersionAlwaysCompatible", "test_fetch_filter_null_pinned_version_always_compatible", capFetchFilterNullPinnedVersionAlwaysCompatible},
		{"FetchFilterBoundaryVersions", "test_fetch_filter_boundary_versions", capFetchFilterBoundaryVersions},
		{"PinnedVersionStoredViaAckMetadata", "test_pinned_version_stored_via_ack_metadata", capPinnedVersionStoredViaAckMetadata},
		{"PinnedVersionImmutableAcrossAckCycles", "test_pinned_version_immutable_across_ack_cycles", capPinnedVersionImmutableAcrossAckCycles},
		{"ContinueAsNewExecutionGetsOwnPinnedVersion", "test_continue_as_new_execution_gets_own_pinned_version", capContinueAsNewExecutionGetsOwnPinnedVersion},
		{"FilterWithEmptySupportedVersionsReturnsNothing", "test_filter_with_empty_supported_versions_returns_nothing", capFilterWithEmptySupportedVersionsReturnsNothing},
		{"ConcurrentFilteredFetchNoDoubleLock", "test_concurrent_filtered_fetch_no_double_lock", capConcurrentFilteredFetchNoDoubleLock},
		{"AckStoresPinnedVersionViaMetadataUpdate", "test_ack_stores_pinned_version_via_metadata_update", capAckStoresPinnedVersionViaMetadataUpdate},
		{"ProviderUpdatesPinnedVersionWhenTold", "test_provider_updates_pinned_version_when_told", capProviderUpdatesPinnedVersionWhenTold},
		{"FetchCorruptedHistoryFilteredVsUnfiltered", "test_fetch_corrupted_history_filtered_vs_unfiltered", capFetchCorruptedHistoryFilteredVsUnfiltered},
		{"FetchDeserializationErrorIncrementsAttemptCount", "test_fetch_deserialization_error_increments_attempt_count", capFetchDeserializationErrorIncrementsAttemptCount},
		{"FetchDeserializationErrorEventuallyReachesPoison", "test_fetch_deserialization_error_eventually_reaches_poison", capFetchDeserializationErrorEventuallyReachesPoison},
		{"FetchFilterAppliedBeforeHistoryDeserialization", "test_fetch_filter_applied_before_history_deserialization", capFetchFilterAppliedBeforeHistoryDeserialization},
		{"FetchSingleRangeOnlyUsesFirstRange", "test_fetch_single_range_only_uses_first_range", capFetchSingleRangeOnlyUsesFirstRange},
		{"AckAppendsEventToCorruptedHistory", "test_ack_appends_event_to_corrupted_history", capAckAppendsEventToCorruptedHistory},
	}})
}

// ---- helpers of this module ----

// capFilter is a capability filter with the single inclusive range [min, max].
func capFilter(min, max string) *provider.CapabilityFilter {
	return &provider.CapabilityFilter{SupportedVersions: []provider.SemVerRange{
		{Min: provider.MustSemVer(min), Max: provider.MustSemVer(max)},
	}}
}

// capStartedEvent is the OrchestrationStarted of "TestOrch" 1.0.0 written by runtime
// version runtimeVersion.
func capStartedEvent(instance string, execution uint64, runtimeVersion string) provider.Event {
	ev := startedEvent(provider.InitialEventID, "TestOrch", "1.0.0", "{}")
	ev.InstanceID = instance
	ev.ExecutionID = execution
	ev.RuntimeVersion = runtimeVersion
	return ev
}

// capFetch fetches with the given lock and filter (no poll wait); nil when there is
// no eligible work.
func capFetch(t *testing.T, p provider.Provider, lock time.Duration, filter *provider.CapabilityFilter) *provider.OrchestrationItem {
	t.Helper()
	item, err := p.FetchOrchestrationItem(t.Context(), provider.FetchOptions{LockTimeout: lock, Filter: filter})
	if err != nil {
		t.Fatalf("FetchOrchestrationItem(filter %s): %v", capDescribe(filter), err)
	}
	return item
}

// capMustFetch is capFetch that requires an item.
func capMustFetch(t *testing.T, p provider.Provider, filter *provider.CapabilityFilter, what string) *provider.OrchestrationItem {
	t.Helper()
	item := capFetch(t, p, longLock, filter)
	if item == nil {
		t.Fatalf("FetchOrchestrationItem(filter %s) returned nothing; want %s", capDescribe(filter), what)
	}
	return item
}

// capAbandon releases an orchestration lock without counting the attempt.
func capAbandon(t *testing.T, p provider.Provider, token string, ignoreAttempt bool) {
	t.Helper()
	if err := p.AbandonOrchestrationItem(t.Context(), token, 0, ignoreAttempt); err != nil {
		t.Fatalf("AbandonOrchestrationItem: %v", err)
	}
}

func capDescribe(f *provider.CapabilityFilter) string {
	if f == nil {
		return "none"
	}
	parts := make([]string, 0, len(f.SupportedVersions))
	for _, r := range f.SupportedVersions {
		parts = append(parts, "["+r.Min.String()+", "+r.Max.String()+"]")
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// capSeed creates instance pinned to version pinned: it enqueues the start, fetches
// until it holds that instance (keeping other instances' locks until the end), and
// acks an OrchestrationStarted written by that version, with the pin in the metadata
// and a follow-up ExternalRaised in the same ack so the instance has pending work.
func capSeed(t *testing.T, p provider.Provider, instance, pinned string) {
	t.Helper()
	enqueueOrch(t, p, startItem(instance, "TestOrch", "1.0.0", "{}"), 0)
	var others []string
	var token string
	for {
		item := mustFetchOrch(t, p, longLock, "the start of "+instance)
		if item.Instance == instance {
			token = item.LockToken
			break
		}
		others = append(others, item.LockToken)
	}
	md := metadata("TestOrch", "1.0.0")
	md.PinnedVersion = ptr(provider.MustSemVer(pinned))
	ackOrch(t, p, token, provider.OrchestrationAck{
		ExecutionID:       provider.InitialExecutionID,
		HistoryDelta:      []provider.Event{capStartedEvent(instance, provider.InitialExecutionID, pinned)},
		OrchestratorItems: []provider.WorkItem{externalRaised(instance, "ping", "{}")},
		Metadata:          md,
	})
	for _, tok := range others {
		_ = p.AbandonOrchestrationItem(t.Context(), tok, 0, true)
	}
}

// capNeedCorrupt skips the test when the factory cannot corrupt a history.
func capNeedCorrupt(t *testing.T, e penv) {
	t.Helper()
	if e.f.CorruptInstanceHistory == nil {
		e.lacks(t, "the CorruptInstanceHistory hook", "it stores undecodable history")
	}
}

// capNeedMaxAttempt skips the test when the factory cannot report attempt counts.
func capNeedMaxAttempt(t *testing.T, e penv) {
	t.Helper()
	if e.f.MaxAttemptCount == nil {
		e.lacks(t, "the MaxAttemptCount hook", "it reads pending attempt counts")
	}
}

// capSeedCorrupt seeds instance pinned to pinned and then damages its history.
func capSeedCorrupt(t *testing.T, e penv, p provider.Provider, instance, pinned string) {
	t.Helper()
	capSeed(t, p, instance, pinned)
	e.f.CorruptInstanceHistory(t, p, instance)
}

// ---- Category A: filtering ----

func capFetchWithFilterNoneReturnsAnyItem(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-1", "1.2.3")

	if item := capFetch(t, p, longLock, nil); item == nil {
		t.Fatal("fetch without a filter returned nothing; want the instance pinned to 1.2.3 (unfiltered fetch returns any item)")
	}
}

func capFetchWithCompatibleFilterReturnsItem(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-2", "1.2.3")

	if item := capFetch(t, p, longLock, capFilter("1.0.0", "1.9.9")); item == nil {
		t.Fatal("filter [1.0.0, 1.9.9] returned nothing; want the instance pinned to 1.2.3")
	}
}

func capFetchWithIncompatibleFilterSkipsItem(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-3", "1.2.3")

	if item := capFetch(t, p, longLock, capFilter("2.0.0", "2.9.9")); item != nil {
		t.Fatalf("filter [2.0.0, 2.9.9] returned instance %q pinned to 1.2.3; want nothing", item.Instance)
	}
}

func capFetchFilterSkipsIncompatibleSelectsCompatible(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-v1", "1.0.0")
	capSeed(t, p, "inst-v2", "2.0.0")

	// inst-v1 is older in the queue, but only inst-v2 passes the v2 filter.
	item := capMustFetch(t, p, capFilter("2.0.0", "2.9.9"), "inst-v2")
	if item.Instance != "inst-v2" {
		t.Fatalf("filter [2.0.0, 2.9.9] returned %q; want inst-v2", item.Instance)
	}
	capAbandon(t, p, item.LockToken, true)

	item = capMustFetch(t, p, capFilter("1.0.0", "1.9.9"), "inst-v1")
	if item.Instance != "inst-v1" {
		t.Fatalf("filter [1.0.0, 1.9.9] returned %q; want inst-v1", item.Instance)
	}
}

func capFetchFilterDoesNotLockSkippedInstances(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-5", "1.0.0")

	if item := capFetch(t, p, longLock, capFilter("2.0.0", "2.9.9")); item != nil {
		t.Fatalf("incompatible filter returned %q; want nothing", item.Instance)
	}
	if item := capFetch(t, p, longLock, capFilter("0.0.0", "1.9.9")); item == nil {
		t.Fatal("compatible fetch returned nothing: the incompatible fetch must not have locked the instance")
	}
}

func capFetchFilterNullPinnedVersionAlwaysCompatible(t *testing.T, e penv) {
	p := e.open(t)
	// An instance acked without a pin (data written before pinning existed).
	enqueueOrch(t, p, startItem("inst-null", "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of inst-null")
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  provider.InitialExecutionID,
		HistoryDelta: []provider.Event{capStartedEvent("inst-null", provider.InitialExecutionID, "0.0.0")},
		Metadata:     metadata("TestOrch", "1.0.0"), // PinnedVersion nil
	})
	enqueueOrch(t, p, externalRaised("inst-null", "ping", "{}"), 0)

	if got := capFetch(t, p, longLock, capFilter("99.0.0", "99.9.9")); got == nil {
		t.Fatal("filter [99.0.0, 99.9.9] returned nothing; an execution without a pinned version must always pass")
	}
}

func capFetchFilterBoundaryVersions(t *testing.T, e penv) {
	p := e.open(t)
	filter := capFilter("1.0.0", "1.9.99")

	// Lower bound is inclusive.
	capSeed(t, p, "v1-low", "1.0.0")
	item := capFetch(t, p, longLock, filter)
	if item == nil {
		t.Fatal("1.0.0 should be within [1.0.0, 1.9.99]; fetch returned nothing")
	}
	if item.Instance != "v1-low" {
		t.Fatalf("fetched %q; want v1-low", item.Instance)
	}
	capAbandon(t, p, item.LockToken, true)

	// Upper bound is inclusive.
	capSeed(t, p, "v1-high", "1.9.99")
	item = capFetch(t, p, longLock, filter)
	if item == nil {
		t.Fatal("1.9.99 should be within [1.0.0, 1.9.99]; fetch returned nothing")
	}
	capAbandon(t, p, item.LockToken, true)

	// Just outside, on a separate provider so the v1 instances cannot interfere.
	p2 := e.open(t)
	capSeed(t, p2, "v2-exact", "2.0.0")
	if item := capFetch(t, p2, longLock, filter); item != nil {
		t.Fatalf("2.0.0 should NOT be within [1.0.0, 1.9.99]; fetch returned %q", item.Instance)
	}
	if item := capFetch(t, p2, longLock, nil); item == nil {
		t.Fatal("v2-exact should be fetchable without a filter; fetch returned nothing")
	}
}

func capPinnedVersionStoredViaAckMetadata(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-8", "3.1.4")

	if item := capFetch(t, p, longLock, capFilter("3.0.0", "3.9.9")); item == nil {
		t.Fatal("filter [3.0.0, 3.9.9] returned nothing; the pin 3.1.4 given in the ack metadata should be stored")
	}
}

func capPinnedVersionImmutableAcrossAckCycles(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-9", "1.0.0")
	filter := capFilter("0.0.0", "1.9.9")

	item := capMustFetch(t, p, filter, "inst-9")
	if item.Instance != "inst-9" {
		t.Fatalf("fetched %q; want inst-9", item.Instance)
	}
	// A second turn acked without a pin must leave the stored pin alone.
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID: provider.InitialExecutionID,
		Metadata:    metadata("TestOrch", "1.0.0"),
	})
	enqueueOrch(t, p, externalRaised("inst-9", "ping2", "{}"), 0)

	if item := capFetch(t, p, longLock, filter); item == nil {
		t.Fatal("filter [0.0.0, 1.9.9] returned nothing after an ack without a pin; the pin 1.0.0 should persist")
	}
}

// ---- Category B: ContinueAsNew execution isolation ----

func capContinueAsNewExecutionGetsOwnPinnedVersion(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-can"
	capSeed(t, p, inst, "1.0.0")

	// Execution 1 continues as new.
	item := capMustFetch(t, p, capFilter("0.0.0", "1.9.9"), inst)
	md := metadata("TestOrch", "1.0.0")
	md.Status = ptr(provider.StatusContinuedAsNew)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID: provider.InitialExecutionID,
		HistoryDelta: []provider.Event{{
			Kind: provider.EventOrchestrationContinuedAsNew, EventID: 2,
			InstanceID: inst, ExecutionID: provider.InitialExecutionID, Input: "{}",
		}},
		OrchestratorItems: []provider.WorkItem{{
			Kind: provider.WorkContinueAsNew, Instance: inst, Name: "TestOrch", Input: "{}", Version: "1.0.0",
		}},
		Metadata: md,
	})

	// Execution 2 starts, pinned to 2.0.0.
	const exec2 = provider.InitialExecutionID + 1
	item = capMustFetch(t, p, nil, "the ContinueAsNew of "+inst)
	md = metadata("TestOrch", "1.0.0")
	md.PinnedVersion = ptr(provider.MustSemVer("2.0.0"))
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  exec2,
		HistoryDelta: []provider.Event{capStartedEvent(inst, exec2, "2.0.0")},
		Metadata:     md,
	})
	enqueueOrch(t, p, externalRaised(inst, "ping", "{}"), 0)

	item = capFetch(t, p, longLock, capFilter("2.0.0", "2.9.9"))
	if item == nil {
		t.Fatal("filter [2.0.0, 2.9.9] returned nothing after ContinueAsNew; execution 2 is pinned to 2.0.0")
	}
	if item.Instance != inst {
		t.Fatalf("fetched %q; want %s", item.Instance, inst)
	}
	capAbandon(t, p, item.LockToken, true)

	if item := capFetch(t, p, longLock, capFilter("1.0.0", "1.9.9")); item != nil {
		t.Fatalf("filter [1.0.0, 1.9.9] returned %q; execution 2 is pinned to 2.0.0 and must not inherit execution 1's pin 1.0.0", item.Instance)
	}
}

// ---- Category F: edge cases ----

func capFilterWithEmptySupportedVersionsReturnsNothing(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-empty", "1.0.0")

	empty := &provider.CapabilityFilter{SupportedVersions: []provider.SemVerRange{}}
	if item := capFetch(t, p, longLock, empty); item != nil {
		t.Fatalf("a filter with no ranges returned %q; want nothing", item.Instance)
	}
}

func capConcurrentFilteredFetchNoDoubleLock(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-conc", "1.0.0")
	filter := capFilter("0.0.0", "1.9.9")

	if item := capFetch(t, p, longLock, filter); item == nil {
		t.Fatal("first filtered fetch returned nothing; want inst-conc")
	}
	if item := capFetch(t, p, longLock, filter); item != nil {
		t.Fatalf("second filtered fetch returned %q; want nothing (the instance is locked)", item.Instance)
	}
}

// ---- Category F2: pinned version updates ----

func capAckStoresPinnedVersionViaMetadataUpdate(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-backfill"
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  provider.InitialExecutionID,
		HistoryDelta: []provider.Event{capStartedEvent(inst, provider.InitialExecutionID, "1.2.3")},
		Metadata:     metadata("TestOrch", "1.0.0"), // no pin yet
	})
	enqueueOrch(t, p, externalRaised(inst, "ping", "{}"), 0)

	// A later turn backfills the pin.
	item = mustFetchOrch(t, p, longLock, inst)
	md := metadata("TestOrch", "1.0.0")
	md.PinnedVersion = ptr(provider.MustSemVer("1.2.3"))
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: provider.InitialExecutionID, Metadata: md})
	enqueueOrch(t, p, externalRaised(inst, "ping2", "{}"), 0)

	if item := capFetch(t, p, longLock, capFilter("1.0.0", "1.9.9")); item == nil {
		t.Fatal("filter [1.0.0, 1.9.9] returned nothing; the backfilled pin 1.2.3 should be stored")
	}
}

func capProviderUpdatesPinnedVersionWhenTold(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "inst-update"
	capSeed(t, p, inst, "1.0.0")

	// The provider stores whatever pin it is given (write-once is the runtime's job).
	item := capMustFetch(t, p, capFilter("0.0.0", "1.9.9"), inst)
	md := metadata("TestOrch", "1.0.0")
	md.PinnedVersion = ptr(provider.MustSemVer("2.0.0"))
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{ExecutionID: provider.InitialExecutionID, Metadata: md})
	enqueueOrch(t, p, externalRaised(inst, "ping2", "{}"), 0)

	item = capFetch(t, p, longLock, capFilter("2.0.0", "2.0.0"))
	if item == nil {
		t.Fatal("filter [2.0.0, 2.0.0] returned nothing; the provider should have overwritten the pin with 2.0.0")
	}
	capAbandon(t, p, item.LockToken, true)

	if item := capFetch(t, p, longLock, capFilter("1.0.0", "1.0.0")); item != nil {
		t.Fatalf("filter [1.0.0, 1.0.0] returned %q; the pin was updated to 2.0.0", item.Instance)
	}
}

// ---- Category I: undecodable history ----

func capFetchCorruptedHistoryFilteredVsUnfiltered(t *testing.T, e penv) {
	capNeedCorrupt(t, e)
	p := e.open(t)
	const inst = "inst-corrupt-39"
	capSeedCorrupt(t, e, p, inst, "1.0.0")

	// A filter that excludes the instance answers nothing, without decoding history.
	item, err := p.FetchOrchestrationItem(t.Context(), provider.FetchOptions{LockTimeout: longLock, Filter: capFilter("2.0.0", "2.9.9")})
	if err != nil {
		t.Fatalf("filtered fetch failed: %v; an excluded instance must not produce an error", err)
	}
	if item != nil {
		t.Fatalf("filtered fetch returned %q; want nothing for an excluded version", item.Instance)
	}

	// Unfiltered: the item comes back with HistoryError set and no history.
	item, err = p.FetchOrchestrationItem(t.Context(), provider.FetchOptions{LockTimeout: longLock})
	if err != nil {
		t.Fatalf("unfiltered fetch of a corrupted history failed: %v; want an item with HistoryError", err)
	}
	if item == nil {
		t.Fatal("unfiltered fetch of a corrupted history returned nothing; want an item with HistoryError")
	}
	if item.HistoryError == "" {
		t.Fatal("corrupted history should set HistoryError; it is empty")
	}
	if len(item.History) != 0 {
		t.Fatalf("History has %d events; want none when HistoryError is set", len(item.History))
	}
	if item.Instance != inst {
		t.Fatalf("fetched %q; want %s", item.Instance, inst)
	}
	capAbandon(t, p, item.LockToken, true)
}

// capCorruptCycles fetches the corrupted instance n times with a short lock, each
// time requiring HistoryError and abandoning without ignoring the attempt.
func capCorruptCycles(t *testing.T, p provider.Provider, n int) {
	t.Helper()
	const shortLock = 50 * time.Millisecond
	for i := 1; i <= n; i++ {
		item, err := p.FetchOrchestrationItem(t.Context(), provider.FetchOptions{LockTimeout: shortLock})
		if err != nil {
			t.Fatalf("fetch #%d of a corrupted history failed: %v; want an item with HistoryError", i, err)
		}
		if item == nil {
			t.Fatalf("fetch #%d of a corrupted history returned nothing; want an item with HistoryError", i)
		}
		if item.HistoryError == "" {
			t.Fatalf("fetch #%d: HistoryError is empty; want it set", i)
		}
		// ignoreAttempt=false keeps the incremented attempt count.
		capAbandon(t, p, item.LockToken, false)
		time.Sleep(100 * time.Millisecond)
	}
}

func capFetchDeserializationErrorIncrementsAttemptCount(t *testing.T, e penv) {
	t.Parallel()
	capNeedCorrupt(t, e)
	capNeedMaxAttempt(t, e)
	p := e.open(t)
	const inst = "inst-deser-41"
	capSeedCorrupt(t, e, p, inst, "1.0.0")

	capCorruptCycles(t, p, 2)

	if got := e.f.MaxAttemptCount(t, p, inst); got < 2 {
		t.Fatalf("max attempt count after two fetch cycles = %d; want >= 2", got)
	}
}

func capFetchDeserializationErrorEventuallyReachesPoison(t *testing.T, e penv) {
	t.Parallel()
	capNeedCorrupt(t, e)
	capNeedMaxAttempt(t, e)
	p := e.open(t)
	const inst = "inst-poison-42"
	const maxAttempts = 5
	capSeedCorrupt(t, e, p, inst, "1.0.0")

	capCorruptCycles(t, p, maxAttempts)

	if got := e.f.MaxAttemptCount(t, p, inst); got < maxAttempts {
		t.Fatalf("max attempt count after %d fetch cycles = %d; want >= %d", maxAttempts, got, maxAttempts)
	}
}

func capFetchFilterAppliedBeforeHistoryDeserialization(t *testing.T, e penv) {
	capNeedCorrupt(t, e)
	p := e.open(t)
	capSeedCorrupt(t, e, p, "inst-order-43", "99.0.0")

	// Were history decoded before filtering, this would be an item with HistoryError.
	item, err := p.FetchOrchestrationItem(t.Context(), provider.FetchOptions{LockTimeout: longLock, Filter: capFilter("1.0.0", "2.0.0")})
	if err != nil {
		t.Fatalf("filtered fetch failed: %v; the filter must be applied before history is decoded", err)
	}
	if item != nil {
		t.Fatalf("filter [1.0.0, 2.0.0] returned %q (HistoryError %q) pinned to 99.0.0; want nothing", item.Instance, item.HistoryError)
	}

	item, err = p.FetchOrchestrationItem(t.Context(), provider.FetchOptions{LockTimeout: longLock})
	if err != nil {
		t.Fatalf("unfiltered fetch of a corrupted history failed: %v; want an item with HistoryError", err)
	}
	if item == nil {
		t.Fatal("unfiltered fetch of a corrupted history returned nothing; want an item with HistoryError")
	}
	if item.HistoryError == "" {
		t.Fatal("unfiltered fetch of a corrupted history: HistoryError is empty; want it set")
	}
	capAbandon(t, p, item.LockToken, true)
}

func capFetchSingleRangeOnlyUsesFirstRange(t *testing.T, e penv) {
	p := e.open(t)
	capSeed(t, p, "inst-range-a", "1.0.0")
	capSeed(t, p, "inst-range-b", "3.0.0")

	filter := &provider.CapabilityFilter{SupportedVersions: []provider.SemVerRange{
		{Min: provider.MustSemVer("1.0.0"), Max: provider.MustSemVer("1.5.0")},
		{Min: provider.MustSemVer("3.0.0"), Max: provider.MustSemVer("3.5.0")},
	}}

	item := capFetch(t, p, longLock, filter)
	if item == nil {
		t.Fatal("two-range filter returned nothing; want inst-range-a (first range)")
	}
	if item.Instance != "inst-range-a" {
		t.Fatalf("two-range filter returned %q; want inst-range-a (first range)", item.Instance)
	}
	capAbandon(t, p, item.LockToken, true)

	// inst-range-a may come back (it was abandoned), inst-range-b must not.
	if item := capFetch(t, p, longLock, filter); item != nil && item.Instance != "inst-range-a" {
		t.Fatalf("two-range filter returned %q; only the first range may be used, so only inst-range-a is eligible", item.Instance)
	}
}

func capAckAppendsEventToCorruptedHistory(t *testing.T, e penv) {
	capNeedCorrupt(t, e)
	p := e.open(t)
	admin := e.admin(t, p)
	const inst = "inst-ack-corrupt-45"
	capSeed(t, p, inst, "1.0.0")
	e.f.CorruptInstanceHistory(t, p, inst)

	item := mustFetchOrch(t, p, longLock, "the corrupted instance "+inst)
	if item.HistoryError == "" {
		t.Fatal("corrupted history should set HistoryError; it is empty")
	}
	if len(item.History) != 0 {
		t.Fatalf("History has %d events; want none when HistoryError is set", len(item.History))
	}

	// Poison-terminate: append an OrchestrationFailed at a sentinel id. The ack must
	// only insert, never re-read or re-encode the damaged rows.
	details := &provider.ErrorDetails{
		Kind: provider.ErrorPoison, AttemptCount: 4, MaxAttempts: 3,
		PoisonType: provider.PoisonFailedDeserialization, Instance: inst, ExecutionID: item.ExecutionID,
		Error: item.HistoryError, Message: item.HistoryError,
	}
	failed := provider.Event{
		Kind: provider.EventOrchestrationFailed, EventID: 99999,
		InstanceID: inst, ExecutionID: item.ExecutionID, Details: details,
	}
	md := provider.ExecutionMetadata{
		Status:               ptr(provider.StatusFailed),
		Output:               ptr(details.DisplayMessage()),
		OrchestrationName:    ptr(item.OrchestrationName),
		OrchestrationVersion: ptr(item.Version),
	}
	if err := p.AckOrchestrationItem(t.Context(), item.LockToken, provider.OrchestrationAck{
		ExecutionID:  item.ExecutionID,
		HistoryDelta: []provider.Event{failed},
		Metadata:     md,
	}); err != nil {
		t.Fatalf("AckOrchestrationItem on a corrupted history: %v; the ack must append without re-reading existing rows", err)
	}

	info, err := admin.GetInstanceInfo(t.Context(), inst)
	if err != nil {
		t.Fatalf("GetInstanceInfo(%s): %v", inst, err)
	}
	if info.Status != provider.StatusFailed {
		t.Fatalf("status after the poison ack = %q; want %q", info.Status, provider.StatusFailed)
	}
	if info.Output == nil || !strings.Contains(*info.Output, "deserialization failed") {
		t.Fatalf("output after the poison ack = %v; want one containing %q", capStr(info.Output), "deserialization failed")
	}
}

func capStr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return "\"" + *s + "\""
}
