package conformance

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/duroq/duroq/eventstore"
)

var esMetaCases = []esCase{
	{"Meta/UpdateCreatesStream", esUpdateCreatesStream},
	{"Meta/AppendCreatesStream", esAppendCreatesStream},
	{"Meta/UpdateChangesOnlyGivenFields", esUpdateChangesOnlyGivenFields},
	{"Meta/StatusAndOutputBelongToPartitions", esStatusAndOutputPerPartition},
	{"Meta/NewPartitionBecomesCurrent", esNewPartitionBecomesCurrent},
	{"Meta/OlderPartitionUpdateKeepsStreamStatus", esOlderPartitionUpdate},
	{"Meta/PinnedVersionPerPartition", esPinnedVersionPerPartition},
	{"Meta/OpaqueStatus", esOpaqueStatus},
	{"Meta/ParentAndChildren", esParentAndChildren},
	{"Meta/ListStreams", esListStreams},
	{"Meta/ListStreamsByNamePrefixAndTime", esListStreamsByNamePrefixAndTime},
	{"Meta/ListStreamsPages", esListStreamsPages},
	{"Meta/ListStreamInfosDescribeEachStream", esListStreamInfos},
	{"Meta/ListStreamInfosPages", esListStreamInfosPages},
	{"Meta/UpdatedAtTracksWrites", esUpdatedAtTracksWrites},
}

var esCustomStatusCases = []esCase{
	{"CustomStatus/Set", esCustomStatusSet},
	{"CustomStatus/Clear", esCustomStatusClear},
	{"CustomStatus/OtherWritesPreserve", esCustomStatusPreserved},
	{"CustomStatus/VersionIncrements", esCustomStatusVersionIncrements},
	{"CustomStatus/PollingWithoutChange", esCustomStatusPolling},
	{"CustomStatus/UnknownStream", esCustomStatusUnknownStream},
	{"CustomStatus/DefaultOnNewStream", esCustomStatusDefault},
}

func esUpdateCreatesStream(x *esT) {
	x.update("s", eventstore.StreamUpdate{Partition: 1, Name: esPtr("Orch"), Version: esPtr("1.0.0")})
	info := x.info("s")
	want := eventstore.StreamInfo{Stream: "s", Name: "Orch", Version: "1.0.0", Status: eventstore.StatusRunning,
		CurrentPartition: 1, CreatedAt: esEpoch, UpdatedAt: esEpoch}
	if !esSameInfo(info, want) {
		x.Fatalf("Stream = %+v, want %+v", info, want)
	}
	parts := x.partitions("s")
	if len(parts) != 1 || parts[0].Partition != 1 || parts[0].Status != eventstore.StatusRunning || parts[0].Events != 0 {
		x.Fatalf("Partitions = %+v, want one empty Running partition 1", parts)
	}
	if events := x.read("s", 1); len(events) != 0 {
		x.Fatalf("Read = %d events, want none", len(events))
	}
}

func esAppendCreatesStream(x *esT) {
	x.append("s", 2, 1)
	info := x.info("s")
	want := eventstore.StreamInfo{Stream: "s", Status: eventstore.StatusRunning, CurrentPartition: 2,
		CreatedAt: esEpoch, UpdatedAt: esEpoch}
	if !esSameInfo(info, want) {
		x.Fatalf("Stream = %+v, want %+v (a stream created by Append has default metadata)", info, want)
	}
}

func esUpdateChangesOnlyGivenFields(x *esT) {
	x.update("s", eventstore.StreamUpdate{Partition: 1, Name: esPtr("TestOrch"), Version: esPtr("1.0.0"),
		Parent: esPtr("p"), Output: esPtr("out"), PinnedVersion: esPtr("0.1.0")})
	x.update("s", eventstore.StreamUpdate{Partition: 1})
	info := x.info("s")
	if info.Name != "TestOrch" || info.Version != "1.0.0" || info.Parent != "p" ||
		info.Output == nil || *info.Output != "out" || info.PinnedVersion == nil || *info.PinnedVersion != "0.1.0" {
		x.Fatalf("an Update without fields changed the stream: %+v", info)
	}
	x.update("s", eventstore.StreamUpdate{Partition: 1, Name: esPtr("InfoOrch"), Version: esPtr("2.0.0")})
	info = x.info("s")
	if info.Name != "InfoOrch" || info.Version != "2.0.0" || info.Parent != "p" {
		x.Fatalf("Stream = %+v, want name InfoOrch, version 2.0.0, parent kept (given fields overwrite)", info)
	}
}

func esStatusAndOutputPerPartition(x *esT) {
	x.append("s", 1, 1, 2)
	done := x.clock.Advance(time.Second)
	completed := eventstore.StatusCompleted
	x.update("s", eventstore.StreamUpdate{Partition: 1, Status: &completed, Output: esPtr("done")})
	info := x.info("s")
	if info.Status != eventstore.StatusCompleted || info.Output == nil || *info.Output != "done" || !info.CompletedAt.Equal(done) {
		x.Fatalf("Stream = %+v, want Completed, output done, completed at %v", info, done)
	}
	p := x.partitions("s")[0]
	if p.Status != eventstore.StatusCompleted || p.Output == nil || *p.Output != "done" || !p.CompletedAt.Equal(done) || !p.StartedAt.Equal(esEpoch) {
		x.Fatalf("partition 1 = %+v, want Completed, output done, started %v, completed %v", p, esEpoch, done)
	}
	x.wantList(eventstore.StreamFilter{Status: eventstore.StatusCompleted}, "listing by status", "s")
	x.wantList(eventstore.StreamFilter{Status: eventstore.StatusRunning}, "listing by status")
}

func esNewPartitionBecomesCurrent(x *esT) {
	x.append("s", 1, 1)
	can := eventstore.StatusContinuedAsNew
	x.update("s", eventstore.StreamUpdate{Partition: 1, Status: &can, Output: esPtr("carried")})
	if info := x.info("s"); info.Status != eventstore.StatusContinuedAsNew || info.CurrentPartition != 1 {
		x.Fatalf("Stream = %+v, want ContinuedAsNew in partition 1", info)
	}
	x.append("s", 2, 1)
	info := x.info("s")
	if info.CurrentPartition != 2 || info.Status != eventstore.StatusRunning || info.Output != nil || !info.CompletedAt.IsZero() {
		x.Fatalf("Stream = %+v, want partition 2 current, Running, no output, not completed (the stream shows its current partition)", info)
	}
	parts := x.partitions("s")
	if len(parts) != 2 || parts[0].Status != eventstore.StatusContinuedAsNew || parts[1].Status != eventstore.StatusRunning {
		x.Fatalf("Partitions = %+v, want [ContinuedAsNew, Running]", parts)
	}
	x.end("s", 2, eventstore.StatusCompleted)
	if info := x.info("s"); info.Status != eventstore.StatusCompleted {
		x.Fatalf("status = %q, want Completed", info.Status)
	}
	// Update can start a partition too.
	x.update("s", eventstore.StreamUpdate{Partition: 3})
	if info := x.info("s"); info.CurrentPartition != 3 || info.Status != eventstore.StatusRunning {
		x.Fatalf("Stream = %+v after Update(partition 3), want partition 3 current and Running", info)
	}
	x.wantList(eventstore.StreamFilter{Status: eventstore.StatusRunning}, "the listing follows the current partition", "s")
}

func esOlderPartitionUpdate(x *esT) {
	x.append("s", 1, 1)
	x.append("s", 2, 1)
	x.end("s", 1, eventstore.StatusFailed)
	if info := x.info("s"); info.Status != eventstore.StatusRunning || info.CurrentPartition != 2 {
		x.Fatalf("Stream = %+v, want Running partition 2 (an older partition's status is its own)", info)
	}
	if p := x.partitions("s"); p[0].Status != eventstore.StatusFailed {
		x.Fatalf("partition 1 status = %q, want Failed", p[0].Status)
	}
}

func esPinnedVersionPerPartition(x *esT) {
	x.update("s", eventstore.StreamUpdate{Partition: 1, PinnedVersion: esPtr("1.0.0")})
	x.update("s", eventstore.StreamUpdate{Partition: 1})
	if v := x.info("s").PinnedVersion; v == nil || *v != "1.0.0" {
		x.Fatalf("pinned version = %v after an Update without one, want 1.0.0 kept", v)
	}
	x.update("s", eventstore.StreamUpdate{Partition: 1, PinnedVersion: esPtr("2.0.0")})
	if v := x.info("s").PinnedVersion; v == nil || *v != "2.0.0" {
		x.Fatalf("pinned version = %v, want 2.0.0 (overwritten whenever given)", v)
	}
	x.end("s", 1, eventstore.StatusContinuedAsNew)
	x.append("s", 2, 1)
	if v := x.info("s").PinnedVersion; v != nil {
		x.Fatalf("pinned version of a new partition = %q, want none (a partition does not inherit it)", *v)
	}
	x.update("s", eventstore.StreamUpdate{Partition: 2, PinnedVersion: esPtr("3.1.4")})
	if v := x.info("s").PinnedVersion; v == nil || *v != "3.1.4" {
		x.Fatalf("pinned version = %v, want 3.1.4", v)
	}
	if p := x.partitions("s"); p[0].PinnedVersion == nil || *p[0].PinnedVersion != "2.0.0" {
		x.Fatalf("partition 1 pinned version = %v, want 2.0.0", p[0].PinnedVersion)
	}
}

func esOpaqueStatus(x *esT) {
	x.append("s", 1, 1)
	x.applyKV("s", 1, esSet("k", "v"))
	x.end("s", 1, "Suspended")
	info := x.info("s")
	if info.Status != "Suspended" || !info.CompletedAt.IsZero() {
		x.Fatalf("Stream = %+v, want status Suspended, not completed", info)
	}
	x.wantList(eventstore.StreamFilter{Status: "Suspended"}, "any status can be listed", "s")
	x.wantSnapshot("s", "a status that does not end the partition merges nothing", map[string]string{})
}

func esParentAndChildren(x *esT) {
	x.create("root", eventstore.StatusRunning)
	x.child("c1", "root", eventstore.StatusRunning)
	x.child("c2", "root", eventstore.StatusRunning)
	x.child("gc", "c1", eventstore.StatusRunning)
	x.create("other", eventstore.StatusRunning)
	if p := x.info("c1").Parent; p != "root" {
		x.Fatalf("parent of c1 = %q, want root", p)
	}
	if p := x.info("root").Parent; p != "" {
		x.Fatalf("parent of root = %q, want none", p)
	}
	x.wantList(eventstore.StreamFilter{Parent: "root"}, "direct children only", "c1", "c2")
	x.wantList(eventstore.StreamFilter{Parent: "c1"}, "children of c1", "gc")
	x.wantList(eventstore.StreamFilter{Parent: "gc"}, "a leaf has no children")
	x.wantList(eventstore.StreamFilter{Parent: "unknown"}, "an unknown stream has no children")
	x.wantList(eventstore.StreamFilter{RootsOnly: true}, "roots", "other", "root")
	_, err := x.s.Stream(x.Context(), "unknown")
	x.wantErr(err, eventstore.ErrNotFound, "Stream(unknown)", "the parent of an unknown stream is not found")
	x.update("c2", eventstore.StreamUpdate{Partition: 1, Parent: esPtr("")})
	if p := x.info("c2").Parent; p != "" {
		x.Fatalf("parent of c2 = %q after clearing it, want none", p)
	}
	x.wantList(eventstore.StreamFilter{Parent: "root"}, "a cleared link is no child", "c1")
}

func esListStreams(x *esT) {
	x.wantList(eventstore.StreamFilter{}, "an empty store lists nothing")
	x.create("b", eventstore.StatusCompleted)
	x.create("a", eventstore.StatusRunning)
	x.create("d", eventstore.StatusFailed)
	x.clock.Advance(time.Minute)
	x.create("c", eventstore.StatusCompleted)
	x.wantList(eventstore.StreamFilter{}, "all streams in id order", "a", "b", "c", "d")
	x.wantList(eventstore.StreamFilter{Status: eventstore.StatusCompleted}, "by status", "b", "c")
	x.wantList(eventstore.StreamFilter{Streams: []string{"d", "a", "zz"}}, "by ids (unknown ids ignored)", "a", "d")
	x.wantList(eventstore.StreamFilter{Streams: []string{}}, "an empty id list selects nothing")
	x.wantList(eventstore.StreamFilter{Limit: 2}, "limit", "a", "b")
	x.wantList(eventstore.StreamFilter{CompletedBefore: esEpoch.Add(time.Second)}, "completed before", "b", "d")
	x.wantList(eventstore.StreamFilter{CompletedBefore: esEpoch}, "completion must be strictly before")
	x.wantList(eventstore.StreamFilter{Status: eventstore.StatusCompleted, CompletedBefore: esEpoch.Add(time.Hour), Limit: 1},
		"conditions are ANDed", "b")
}

// The management filters: by name, by id prefix (byte order, exact at the bounds),
// by creation and update time ranges (from inclusive, until exclusive).
func esListStreamsByNamePrefixAndTime(x *esT) {
	named := func(stream, name string) {
		x.Helper()
		x.append(stream, 1, 1)
		x.update(stream, eventstore.StreamUpdate{Partition: 1, Name: &name})
	}
	named("order-1", "Checkout") // created at esEpoch
	named("order-2", "Refund")
	t1 := x.clock.Advance(time.Minute)
	named("order-3", "Checkout")
	named("order.", "Checkout")       // right after the prefix "order-" in byte order
	named("order-\u00e9", "Checkout") // a multi-byte id inside the prefix
	named("orders", "Checkout")
	t2 := x.clock.Advance(time.Minute)
	x.append("order-1", 1, 2) // updated at t2
	x.wantList(eventstore.StreamFilter{Name: "Checkout"}, "by name", "order-1", "order-3", "order-\u00e9", "order.", "orders")
	x.wantList(eventstore.StreamFilter{Name: "Nobody"}, "an unknown name lists nothing")
	x.wantList(eventstore.StreamFilter{IDPrefix: "order-"}, "by id prefix", "order-1", "order-2", "order-3", "order-\u00e9")
	x.wantList(eventstore.StreamFilter{IDPrefix: "order-\u00e9"}, "a multi-byte prefix", "order-\u00e9")
	x.wantList(eventstore.StreamFilter{IDPrefix: "order", Name: "Refund"}, "prefix and name", "order-2")
	x.wantList(eventstore.StreamFilter{CreatedBefore: t1}, "created before (exclusive)", "order-1", "order-2")
	x.wantList(eventstore.StreamFilter{CreatedAfter: t1, IDPrefix: "order-"}, "created at or after", "order-3", "order-\u00e9")
	x.wantList(eventstore.StreamFilter{UpdatedAfter: t2}, "updated at or after", "order-1")
	x.wantList(eventstore.StreamFilter{UpdatedAfter: esEpoch, UpdatedBefore: t2}, "updated in a range",
		"order-2", "order-3", "order-\u00e9", "order.", "orders")
	x.wantList(eventstore.StreamFilter{Name: "Checkout", After: "order-3", Limit: 2}, "a page of a filtered list", "order-\u00e9", "order.")
}

// Paging with After and Limit lists every stream exactly once, in id order, while
// streams are created before and after the cursor and deleted between pages.
func esListStreamsPages(x *esT) {
	for i := range 10 {
		x.create(fmt.Sprintf("s%02d", i*2), eventstore.StatusRunning)
	}
	var got []string
	after := ""
	for page := 0; ; page++ {
		if page > 20 {
			x.Fatalf("paging did not end: %q", got)
		}
		ids := x.list(eventstore.StreamFilter{After: after, Limit: 3})
		if len(ids) == 0 {
			break
		}
		got = append(got, ids...)
		after = ids[len(ids)-1]
		if page == 1 { // a stream before the cursor, one after it, and one deleted ahead
			x.create("s01", eventstore.StatusRunning)
			x.create("s13", eventstore.StatusRunning)
			_, err := x.s.Delete(x.Context(), []string{"s16"}, eventstore.DeleteOptions{Force: true})
			x.ok(err, "Delete")
		}
	}
	want := []string{"s00", "s02", "s04", "s06", "s08", "s10", "s12", "s13", "s14", "s18"}
	if !slices.Equal(got, want) {
		x.Fatalf("pages of 3 listed %q, want %q (each once, in id order; created after the cursor: listed; before it or deleted: not)", got, want)
	}
}

// ListStreamInfos lists what ListStreams lists under every filter, each stream
// described as Stream describes it (x.list checks both): current partitions above
// 1, ended and running ones, outputs, pinned versions, custom statuses set and
// cleared, parents, a stream made by Update alone and an opaque status.
func esListStreamInfos(x *esT) {
	x.wantList(eventstore.StreamFilter{}, "an empty store lists nothing")
	x.update("order-1", eventstore.StreamUpdate{Partition: 1, Name: esPtr("Checkout"), Version: esPtr("1.0.0"),
		PinnedVersion: esPtr("0.9.1")})
	x.append("order-1", 1, 1, 2)
	x.setCustomStatus("order-1", esPtr("charging"), 1)
	t1 := x.clock.Advance(time.Minute)
	x.update("order-1", eventstore.StreamUpdate{Partition: 1, Status: esPtr(eventstore.StatusCompleted), Output: esPtr(`"paid"`)})
	x.update("order-2", eventstore.StreamUpdate{Partition: 1, Name: esPtr("Checkout"), Version: esPtr("1.1.0")})
	x.update("order-2", eventstore.StreamUpdate{Partition: 1, Status: esPtr(eventstore.StatusContinuedAsNew), Output: esPtr("next")})
	x.append("order-2", 2, 1)
	x.update("order-2", eventstore.StreamUpdate{Partition: 2, Name: esPtr("Checkout"), Version: esPtr("1.1.0"), PinnedVersion: esPtr("1.0.0")})
	x.setCustomStatus("order-2", esPtr("waiting"), 1)
	x.setCustomStatus("order-2", nil, 2)
	x.clock.Advance(time.Minute)
	x.child("order-2-refund", "order-2", eventstore.StatusFailed)
	x.update("order-2-refund", eventstore.StreamUpdate{Partition: 1, Name: esPtr("Refund"), Output: esPtr("card declined")})
	x.update("report", eventstore.StreamUpdate{Partition: 3, Status: esPtr(eventstore.Status("Suspended"))})

	all := []string{"order-1", "order-2", "order-2-refund", "report"}
	x.wantList(eventstore.StreamFilter{}, "every stream", all...)
	x.wantList(eventstore.StreamFilter{Status: eventstore.StatusRunning}, "by status", "order-2")
	x.wantList(eventstore.StreamFilter{Status: "Suspended"}, "an opaque status", "report")
	x.wantList(eventstore.StreamFilter{Name: "Checkout"}, "by name", "order-1", "order-2")
	x.wantList(eventstore.StreamFilter{IDPrefix: "order-2"}, "by id prefix", "order-2", "order-2-refund")
	x.wantList(eventstore.StreamFilter{Parent: "order-2"}, "children", "order-2-refund")
	x.wantList(eventstore.StreamFilter{RootsOnly: true}, "roots", "order-1", "order-2", "report")
	x.wantList(eventstore.StreamFilter{Streams: []string{"report", "order-1", "gone"}}, "by ids", "order-1", "report")
	x.wantList(eventstore.StreamFilter{CreatedAfter: t1}, "created at or after", "order-2", "order-2-refund", "report")
	x.wantList(eventstore.StreamFilter{UpdatedBefore: t1.Add(time.Minute)}, "updated before", "order-1", "order-2")
	x.wantList(eventstore.StreamFilter{CompletedBefore: t1.Add(time.Hour)}, "completed before", "order-1", "order-2-refund")
	x.wantList(eventstore.StreamFilter{RootsOnly: true, After: "order-1", Limit: 1}, "a page of a filtered list", "order-2")
}

// Paging with ListStreamInfos alone (the cursor is the last info's Stream) lists
// every selected stream once, in id order, each described as it is when its page is
// read: metadata changed between pages shows on the later pages.
func esListStreamInfosPages(x *esT) {
	for i := range 9 {
		stream := fmt.Sprintf("s%d", i)
		x.append(stream, 1, 1)
		x.update(stream, eventstore.StreamUpdate{Partition: 1, Name: esPtr("Orch")})
	}
	x.update("s4", eventstore.StreamUpdate{Partition: 1, Name: esPtr("Other")})
	f := eventstore.StreamFilter{Name: "Orch", Limit: 3}
	var got []string
	for page := 0; ; page++ {
		if page > 10 {
			x.Fatalf("paging did not end: %q", got)
		}
		ids := x.list(f) // ListStreams' ids, their infos checked against Stream
		infos := x.wantInfos(f, ids)
		if len(infos) == 0 {
			break
		}
		for _, info := range infos {
			got = append(got, info.Stream)
			if info.Name != "Orch" {
				x.Fatalf("ListStreamInfos(Name Orch) listed %q named %q", info.Stream, info.Name)
			}
		}
		f.After = infos[len(infos)-1].Stream
		if page == 0 { // the streams ahead change: one ends, one is renamed away
			x.clock.Advance(time.Second)
			x.end("s5", 1, eventstore.StatusCompleted)
			x.update("s6", eventstore.StreamUpdate{Partition: 1, Name: esPtr("Other")})
		}
	}
	want := []string{"s0", "s1", "s2", "s3", "s5", "s7", "s8"}
	if !slices.Equal(got, want) {
		x.Fatalf("pages of 3 listed %q, want %q (each once, in id order; renamed away before its page: not listed)", got, want)
	}
	if infos := x.wantInfos(eventstore.StreamFilter{Streams: []string{"s5"}}, []string{"s5"}); infos[0].Status != eventstore.StatusCompleted {
		x.Fatalf("s5 listed as %+v after it completed", infos[0])
	}
}

func esUpdatedAtTracksWrites(x *esT) {
	x.append("s", 1, 1)
	check := func(after string) {
		x.Helper()
		now := x.clock.Now()
		if info := x.info("s"); !info.UpdatedAt.Equal(now) || !info.CreatedAt.Equal(esEpoch) {
			x.Fatalf("after %s: CreatedAt %v, UpdatedAt %v; want %v and %v", after, info.CreatedAt, info.UpdatedAt, esEpoch, now)
		}
	}
	check("Append")
	x.clock.Advance(time.Second)
	x.append("s", 1, 2)
	check("another Append")
	x.clock.Advance(time.Second)
	x.update("s", eventstore.StreamUpdate{Partition: 1, Name: esPtr("n")})
	check("Update")
	x.clock.Advance(time.Second)
	_, err := x.s.SetCustomStatus(x.Context(), "s", esPtr("x"))
	x.ok(err, "SetCustomStatus")
	check("SetCustomStatus")
	x.clock.Advance(time.Second)
	x.applyKV("s", 1, esSet("k", "v"))
	check("ApplyKV")
}

// esSameInfo compares stream metadata, pointers by value and times by instant.
func esSameInfo(a, b eventstore.StreamInfo) bool {
	eq := func(p, q *string) bool { return (p == nil) == (q == nil) && (p == nil || *p == *q) }
	return a.Stream == b.Stream && a.Name == b.Name && a.Version == b.Version && a.Parent == b.Parent &&
		a.Status == b.Status && eq(a.Output, b.Output) && eq(a.PinnedVersion, b.PinnedVersion) &&
		a.CompletedAt.Equal(b.CompletedAt) && a.CurrentPartition == b.CurrentPartition &&
		eq(a.CustomStatus, b.CustomStatus) && a.CustomStatusVersion == b.CustomStatusVersion &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt)
}

// --- custom status ---

func (x *esT) setCustomStatus(stream string, value *string, wantVersion int64) {
	x.Helper()
	v, err := x.s.SetCustomStatus(x.Context(), stream, value)
	x.ok(err, "SetCustomStatus")
	if v != wantVersion {
		x.Fatalf("SetCustomStatus returned version %d, want %d (every set and clear counts)", v, wantVersion)
	}
}

// wantCustomStatus checks CustomStatus(stream, lastSeen); value "" with changed
// means cleared.
func (x *esT) wantCustomStatus(stream string, lastSeen int64, changed bool, value *string, version int64, rule string) {
	x.Helper()
	cs, ok, err := x.s.CustomStatus(x.Context(), stream, lastSeen)
	x.ok(err, "CustomStatus")
	if ok != changed {
		x.Fatalf("CustomStatus(%q, %d) changed = %v, want %v (%s)", stream, lastSeen, ok, changed, rule)
	}
	if !changed {
		return
	}
	if cs.Version != version || (cs.Value == nil) != (value == nil) || (value != nil && *cs.Value != *value) {
		x.Fatalf("CustomStatus(%q, %d) = (%v, %d), want (%v, %d) (%s)", stream, lastSeen, esDeref(cs.Value), cs.Version, esDeref(value), version, rule)
	}
}

func esDeref(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func esCustomStatusSet(x *esT) {
	x.create("s", eventstore.StatusRunning)
	x.setCustomStatus("s", esPtr("progress"), 1)
	x.wantCustomStatus("s", 0, true, esPtr("progress"), 1, "a set is visible with version 1")
	info := x.info("s")
	if info.CustomStatus == nil || *info.CustomStatus != "progress" || info.CustomStatusVersion != 1 {
		x.Fatalf("Stream custom status = (%v, %d), want (progress, 1)", esDeref(info.CustomStatus), info.CustomStatusVersion)
	}
}

func esCustomStatusClear(x *esT) {
	x.create("s", eventstore.StatusRunning)
	x.setCustomStatus("s", esPtr("temp"), 1)
	x.setCustomStatus("s", nil, 2)
	x.wantCustomStatus("s", 0, true, nil, 2, "a clear moves the version and reports no value")
	x.wantCustomStatus("s", 1, true, nil, 2, "a clear is a change")
}

func esCustomStatusPreserved(x *esT) {
	x.create("s", eventstore.StatusRunning)
	x.setCustomStatus("s", esPtr("keep-me"), 1)
	x.append("s", 1, 2)
	x.update("s", eventstore.StreamUpdate{Partition: 1, Name: esPtr("n")})
	x.applyKV("s", 1, esSet("k", "v"))
	x.end("s", 1, eventstore.StatusContinuedAsNew)
	x.append("s", 2, 1)
	x.wantCustomStatus("s", 0, true, esPtr("keep-me"), 1, "other writes leave the custom status and its version alone")
}

func esCustomStatusVersionIncrements(x *esT) {
	x.create("s", eventstore.StatusRunning)
	x.setCustomStatus("s", esPtr("a"), 1)
	x.setCustomStatus("s", esPtr("a"), 2)
	x.setCustomStatus("s", nil, 3)
	x.setCustomStatus("s", nil, 4)
	x.wantCustomStatus("s", 3, true, nil, 4, "set, same set, clear, clear: versions 1..4")
}

func esCustomStatusPolling(x *esT) {
	x.create("s", eventstore.StatusRunning)
	x.setCustomStatus("s", esPtr("p"), 1)
	x.wantCustomStatus("s", 1, false, nil, 0, "nothing new since version 1")
	x.wantCustomStatus("s", 5, false, nil, 0, "nothing newer than a later version")
	x.wantCustomStatus("s", 0, true, esPtr("p"), 1, "version 1 is newer than 0")
}

func esCustomStatusUnknownStream(x *esT) {
	x.wantCustomStatus("nobody", 0, false, nil, 0, "an unknown stream has no custom status")
	_, err := x.s.SetCustomStatus(x.Context(), "nobody", esPtr("x"))
	x.wantErr(err, eventstore.ErrNotFound, "SetCustomStatus(unknown)", "custom status belongs to an existing stream")
	if nf, ok := errors.AsType[*eventstore.NotFoundError](err); !ok || nf.Stream != "nobody" {
		x.Fatalf("error %v does not name the stream", err)
	}
	if x.exists("nobody") {
		x.Fatal("SetCustomStatus created a stream")
	}
}

func esCustomStatusDefault(x *esT) {
	x.create("s", eventstore.StatusRunning)
	x.wantCustomStatus("s", 0, false, nil, 0, "a new stream's custom status is at version 0")
	if info := x.info("s"); info.CustomStatus != nil || info.CustomStatusVersion != 0 {
		x.Fatalf("new stream custom status = (%v, %d), want (nil, 0)", esDeref(info.CustomStatus), info.CustomStatusVersion)
	}
}
