// Port of duroxide's provider validation module tag_filtering
// (src/provider_validation/tag_filtering.rs, snapshot 0.1.26, commit 58cdc0e):
// FetchWorkItem selects activities by tag according to the TagFilter.
package conformance

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerProviderGroup(providerGroup{name: "TagFiltering", cases: []providerCase{
		{"DefaultOnlyFetchesUntagged", "test_default_only_fetches_untagged", tagfDefaultOnlyFetchesUntagged},
		{"TagsFetchesOnlyMatching", "test_tags_fetches_only_matching", tagfTagsFetchesOnlyMatching},
		{"DefaultAndFetchesUntaggedAndMatching", "test_default_and_fetches_untagged_and_matching", tagfDefaultAndFetchesUntaggedAndMatching},
		{"NoneFilterReturnsNothing", "test_none_filter_returns_nothing", tagfNoneFilterReturnsNothing},
		{"MultiTagFilter", "test_multi_tag_filter", tagfMultiTagFilter},
		{"TagRoundTripPreservation", "test_tag_round_trip_preservation", tagfTagRoundTripPreservation},
		{"AnyFilterFetchesEverything", "test_any_filter_fetches_everything", tagfAnyFilterFetchesEverything},
		{"TagSurvivesAbandonAndRefetch", "test_tag_survives_abandon_and_refetch", tagfTagSurvivesAbandonAndRefetch},
		{"MultiRuntimeTagIsolation", "test_multi_runtime_tag_isolation", tagfMultiRuntimeTagIsolation},
		{"TagPreservedThroughAckOrchestrationItem", "test_tag_preserved_through_ack_orchestration_item", tagfTagPreservedThroughAckOrchestrationItem},
	}})
}

// ---- helpers of this module ----

// tagfActivity is ActivityExecute id of instance (execution 1), named "Activity<id>",
// tagged tag ("" = untagged).
func tagfActivity(instance string, id uint64, tag string) provider.WorkItem {
	it := activityExecute(instance, 1, id, fmt.Sprintf("Activity%d", id), "{}")
	it.Tag = tag
	return it
}

func tagfOnly(tags ...string) provider.TagFilter {
	return provider.TagFilter{Mode: provider.TagOnly, Tags: tags}
}

// tagfFetch fetches a worker item (no session) with filter; nil when none.
func tagfFetch(t *testing.T, p provider.Provider, lock time.Duration, filter provider.TagFilter) *provider.WorkItemLease {
	t.Helper()
	lease, err := p.FetchWorkItem(t.Context(), provider.WorkFetchOptions{LockTimeout: lock, Tags: filter})
	if err != nil {
		t.Fatalf("FetchWorkItem(tags %s): %v", tagfDescribe(filter), err)
	}
	if lease != nil && lease.Item.Kind != provider.WorkActivityExecute {
		t.Fatalf("FetchWorkItem returned a %s item; want ActivityExecute", lease.Item.Kind)
	}
	return lease
}

// tagfMustFetch is tagfFetch that requires an item.
func tagfMustFetch(t *testing.T, p provider.Provider, lock time.Duration, filter provider.TagFilter, what string) *provider.WorkItemLease {
	t.Helper()
	lease := tagfFetch(t, p, lock, filter)
	if lease == nil {
		t.Fatalf("FetchWorkItem(tags %s) returned nothing; want %s", tagfDescribe(filter), what)
	}
	return lease
}

// tagfNothing requires that a fetch with filter returns nothing.
func tagfNothing(t *testing.T, p provider.Provider, lock time.Duration, filter provider.TagFilter, why string) {
	t.Helper()
	if lease := tagfFetch(t, p, lock, filter); lease != nil {
		t.Fatalf("FetchWorkItem(tags %s) returned activity %d (tag %q); want nothing: %s",
			tagfDescribe(filter), lease.Item.ID, lease.Item.Tag, why)
	}
}

// tagfExpect checks a fetched item's id and tag.
func tagfExpect(t *testing.T, l *provider.WorkItemLease, id uint64, tag string) {
	t.Helper()
	if l.Item.ID != id || l.Item.Tag != tag {
		t.Fatalf("fetched activity %d with tag %q; want activity %d with tag %q", l.Item.ID, l.Item.Tag, id, tag)
	}
}

func tagfDescribe(f provider.TagFilter) string {
	switch f.Mode {
	case provider.TagDefaultOnly:
		return "DefaultOnly"
	case provider.TagOnly:
		return fmt.Sprintf("Tags%v", f.Tags)
	case provider.TagDefaultAnd:
		return fmt.Sprintf("DefaultAnd%v", f.Tags)
	case provider.TagAny:
		return "Any"
	case provider.TagNone:
		return "None"
	}
	return fmt.Sprintf("mode %d %v", f.Mode, f.Tags)
}

const tagfLock = 5 * time.Second

// ---- cases ----

func tagfDefaultOnlyFetchesUntagged(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, tagfActivity("inst-1", 1, ""))
	enqueueWork(t, p, tagfActivity("inst-1", 2, "gpu"))
	enqueueWork(t, p, tagfActivity("inst-1", 3, ""))

	def := provider.TagFilter{Mode: provider.TagDefaultOnly}
	tagfExpect(t, tagfMustFetch(t, p, tagfLock, def, "the first untagged activity (1)"), 1, "")
	tagfExpect(t, tagfMustFetch(t, p, tagfLock, def, "the second untagged activity (3)"), 3, "")
	tagfNothing(t, p, tagfLock, def, "no untagged activity is left")
}

func tagfTagsFetchesOnlyMatching(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, tagfActivity("inst-1", 1, ""))
	enqueueWork(t, p, tagfActivity("inst-1", 2, "gpu"))
	enqueueWork(t, p, tagfActivity("inst-1", 3, "cpu"))
	enqueueWork(t, p, tagfActivity("inst-1", 4, "gpu"))

	gpu := tagfOnly("gpu")
	tagfExpect(t, tagfMustFetch(t, p, tagfLock, gpu, "gpu activity 2"), 2, "gpu")
	tagfExpect(t, tagfMustFetch(t, p, tagfLock, gpu, "gpu activity 4"), 4, "gpu")
	tagfNothing(t, p, tagfLock, gpu, "no gpu activity is left")
}

func tagfDefaultAndFetchesUntaggedAndMatching(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, tagfActivity("inst-1", 1, ""))
	enqueueWork(t, p, tagfActivity("inst-1", 2, "gpu"))
	enqueueWork(t, p, tagfActivity("inst-1", 3, "cpu"))

	filter := provider.TagFilter{Mode: provider.TagDefaultAnd, Tags: []string{"gpu"}}
	l := tagfMustFetch(t, p, tagfLock, filter, "untagged activity 1")
	if l.Item.ID != 1 {
		t.Fatalf("fetched activity %d; want untagged activity 1", l.Item.ID)
	}
	tagfExpect(t, tagfMustFetch(t, p, tagfLock, filter, "gpu activity 2"), 2, "gpu")
	tagfNothing(t, p, tagfLock, filter, "the cpu activity must not be fetched by DefaultAnd[gpu]")
}

func tagfNoneFilterReturnsNothing(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, tagfActivity("inst-1", 1, ""))
	enqueueWork(t, p, tagfActivity("inst-1", 2, "gpu"))

	tagfNothing(t, p, tagfLock, provider.TagFilter{Mode: provider.TagNone}, "the None filter never returns items")
}

func tagfMultiTagFilter(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, tagfActivity("inst-1", 1, "gpu"))
	enqueueWork(t, p, tagfActivity("inst-1", 2, "tpu"))
	enqueueWork(t, p, tagfActivity("inst-1", 3, "cpu"))
	enqueueWork(t, p, tagfActivity("inst-1", 4, ""))

	filter := tagfOnly("gpu", "tpu")
	if l := tagfMustFetch(t, p, tagfLock, filter, "the gpu activity"); l.Item.Tag != "gpu" {
		t.Fatalf("fetched tag %q; want gpu", l.Item.Tag)
	}
	if l := tagfMustFetch(t, p, tagfLock, filter, "the tpu activity"); l.Item.Tag != "tpu" {
		t.Fatalf("fetched tag %q; want tpu", l.Item.Tag)
	}
	tagfNothing(t, p, tagfLock, filter, "the cpu and untagged activities do not match")
}

func tagfTagRoundTripPreservation(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, tagfActivity("inst-1", 1, "gpu"))

	l := tagfMustFetch(t, p, tagfLock, tagfOnly("gpu"), "the tagged activity")
	if l.Item.Tag != "gpu" {
		t.Fatalf("fetched tag %q; want gpu (the tag must be preserved)", l.Item.Tag)
	}
	if l.Item.Name != "Activity1" {
		t.Fatalf("fetched name %q; want Activity1", l.Item.Name)
	}
}

func tagfAnyFilterFetchesEverything(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, tagfActivity("inst-1", 1, ""))
	enqueueWork(t, p, tagfActivity("inst-2", 2, "gpu"))
	enqueueWork(t, p, tagfActivity("inst-3", 3, "cpu"))

	anyf := provider.TagFilter{Mode: provider.TagAny}
	tagfMustFetch(t, p, tagfLock, anyf, "the untagged activity")
	tagfMustFetch(t, p, tagfLock, anyf, "the gpu activity")
	tagfMustFetch(t, p, tagfLock, anyf, "the cpu activity")
	tagfNothing(t, p, tagfLock, anyf, "the queue is empty")
}

func tagfTagSurvivesAbandonAndRefetch(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, tagfActivity("inst-1", 1, "gpu"))
	enqueueWork(t, p, tagfActivity("inst-1", 2, ""))

	gpu := tagfOnly("gpu")
	first := tagfMustFetch(t, p, tagfLock, gpu, "gpu activity 1")
	tagfExpect(t, first, 1, "gpu")
	if err := p.AbandonWorkItem(t.Context(), first.LockToken, 0, false); err != nil {
		t.Fatalf("AbandonWorkItem: %v", err)
	}

	again := tagfMustFetch(t, p, tagfLock, gpu, "the abandoned gpu activity 1 again")
	tagfExpect(t, again, 1, "gpu")
	if again.AttemptCount < 2 {
		t.Fatalf("attempt count after abandon and refetch = %d; want >= 2", again.AttemptCount)
	}
	if again.LockToken == first.LockToken {
		t.Fatalf("refetch reused lock token %q; want a new one", first.LockToken)
	}

	// DefaultOnly sees only the untagged activity, never the gpu one.
	tagfExpect(t, tagfMustFetch(t, p, tagfLock, provider.TagFilter{Mode: provider.TagDefaultOnly}, "untagged activity 2"), 2, "")
}

func tagfMultiRuntimeTagIsolation(t *testing.T, e penv) {
	p := e.open(t)
	enqueueWork(t, p, tagfActivity("inst-1", 1, ""))
	enqueueWork(t, p, tagfActivity("inst-2", 2, "gpu"))
	enqueueWork(t, p, tagfActivity("inst-3", 3, "cpu"))
	enqueueWork(t, p, tagfActivity("inst-4", 4, "fpga"))
	enqueueWork(t, p, tagfActivity("inst-5", 5, "gpu"))

	// Mutually exclusive: DefaultOnly sees only the untagged activity.
	def := provider.TagFilter{Mode: provider.TagDefaultOnly}
	tagfExpect(t, tagfMustFetch(t, p, longLock, def, "untagged activity 1"), 1, "")
	tagfNothing(t, p, longLock, def, "no untagged activity is left")

	// Partial overlap: gpu+cpu takes gpu 2 and cpu 3.
	gpuCPU := tagfOnly("gpu", "cpu")
	a := tagfMustFetch(t, p, longLock, gpuCPU, "a gpu or cpu activity")
	b := tagfMustFetch(t, p, longLock, gpuCPU, "a second gpu or cpu activity")
	got := []uint64{a.Item.ID, b.Item.ID}
	slices.Sort(got)
	if !slices.Equal(got, []uint64{2, 3}) {
		t.Fatalf("Tags[gpu cpu] fetched activities %v; want [2 3]", got)
	}

	// cpu+fpga: cpu 3 is locked, so only fpga 4.
	cpuFPGA := tagfOnly("cpu", "fpga")
	tagfExpect(t, tagfMustFetch(t, p, longLock, cpuFPGA, "fpga activity 4"), 4, "fpga")
	tagfNothing(t, p, longLock, cpuFPGA, "cpu 3 is locked and fpga 4 taken")

	// Full overlap: Any picks up the remaining gpu 5; 1-4 are locked.
	anyf := provider.TagFilter{Mode: provider.TagAny}
	tagfExpect(t, tagfMustFetch(t, p, longLock, anyf, "gpu activity 5"), 5, "gpu")
	tagfNothing(t, p, longLock, anyf, "every activity is locked")
}

func tagfTagPreservedThroughAckOrchestrationItem(t *testing.T, e penv) {
	p := e.open(t)
	const inst = "tag-ack-inst"
	enqueueOrch(t, p, startItem(inst, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+inst)

	gpuWork := activityExecute(inst, 1, 10, "GpuWork", `"model-v3"`)
	gpuWork.Tag = "gpu"
	cpuWork := activityExecute(inst, 1, 11, "CpuWork", `"data"`)
	started := startedEvent(1, "TestOrch", "1.0.0", "{}")
	started.InstanceID = inst
	started.ExecutionID = 1
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  1,
		HistoryDelta: []provider.Event{started},
		WorkerItems:  []provider.WorkItem{gpuWork, cpuWork},
	})

	def := provider.TagFilter{Mode: provider.TagDefaultOnly}
	l := tagfMustFetch(t, p, longLock, def, "the untagged CpuWork")
	if l.Item.Name != "CpuWork" || l.Item.Tag != "" {
		t.Fatalf("DefaultOnly fetched %q with tag %q; want CpuWork without a tag", l.Item.Name, l.Item.Tag)
	}
	if err := p.AckWorkItem(t.Context(), l.LockToken, nil); err != nil {
		t.Fatalf("AckWorkItem: %v", err)
	}

	tagfNothing(t, p, longLock, def, "only the gpu-tagged GpuWork is left (was its tag dropped on the ack path?)")

	l = tagfMustFetch(t, p, longLock, tagfOnly("gpu"), "the gpu-tagged GpuWork")
	if l.Item.Name != "GpuWork" || l.Item.Tag != "gpu" {
		t.Fatalf("Tags[gpu] fetched %q with tag %q; want GpuWork tagged gpu", l.Item.Name, l.Item.Tag)
	}
}
