package conformance

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/duroq/duroq/eventstore"
)

var esDeleteCases = []esCase{
	{"Delete/EndedStreams", esDeleteEndedStreams},
	{"Delete/RunningRefusedUnlessForced", esDeleteRunningRefused},
	{"Delete/UnknownStreamFailsWholeCall", esDeleteUnknown},
	{"Delete/CascadeAndChildPolicy", esDeleteCascade},
	{"Delete/AllowNonRootDeletesSubtree", esDeleteAllowNonRoot},
	{"Delete/RunningDescendantRefused", esDeleteRunningDescendant},
	{"Delete/SeveralStreamsAtomically", esDeleteSeveral},
	{"Delete/MixedRunningNeedsForce", esDeleteMixedForce},
	{"Delete/ParentWithoutStreamIsNoObstacle", esDeleteDanglingParent},
	{"Delete/RecreateAfterDelete", esDeleteRecreate},
	{"DeleteWhere/ByIDs", esDeleteWhereByIDs},
	{"DeleteWhere/SkipsRunningAndLimits", esDeleteWhereSafety},
	{"DeleteWhere/CompletedBefore", esDeleteWhereCompletedBefore},
	{"DeleteWhere/CascadesToChildren", esDeleteWhereCascades},
	{"DeleteWhere/RootsOnly", esDeleteWhereRootsOnly},
}

var esPruneCases = []esCase{
	{"Prune/KeepLast", esPruneKeepLast},
	{"Prune/NeverTheCurrentPartition", esPruneSafety},
	{"Prune/RunningStream", esPruneRunningStream},
	{"Prune/CompletedBefore", esPruneCompletedBefore},
	{"Prune/RunningPartitionKept", esPruneRunningPartitionKept},
	{"PruneWhere/Bulk", esPruneWhere},
	{"PruneWhere/IncludesRunningStreams", esPruneWhereRunning},
}

var esStatsCases = []esCase{
	{"Stats/UnknownStream", esStatsUnknown},
	{"Stats/CurrentPartitionEvents", esStatsEvents},
	{"Stats/KVMergedView", esStatsKV},
	{"Stats/Totals", esTotals},
}

// wantDeleted checks a DeleteResult.
func (x *esT) wantDeleted(r eventstore.DeleteResult, partitions, events int64, rule string, streams ...string) {
	x.Helper()
	slices.Sort(streams)
	if !slices.Equal(r.StreamIDs, streams) || r.Streams != len(streams) || r.Partitions != partitions || r.Events != events {
		x.Fatalf("delete result = %+v, want streams %q, %d partitions, %d events (%s)", r, streams, partitions, events, rule)
	}
	x.wantGone(rule, streams...)
}

func esDeleteEndedStreams(x *esT) {
	x.append("done", 1, 1, 2, 3)
	x.end("done", 1, eventstore.StatusCompleted)
	x.chain("failed", 2, eventstore.StatusFailed)
	x.create("cancelled", eventstore.StatusFailed)
	x.create("keep", eventstore.StatusCompleted)
	x.wantDeleted(x.delete([]string{"done"}, eventstore.DeleteOptions{}), 1, 3, "a completed stream deletes without Force", "done")
	x.wantDeleted(x.delete([]string{"failed"}, eventstore.DeleteOptions{}), 2, 2, "a failed stream with two partitions", "failed")
	x.wantDeleted(x.delete([]string{"cancelled"}, eventstore.DeleteOptions{}), 1, 1, "a cancelled (Failed) stream", "cancelled")
	x.wantList(eventstore.StreamFilter{}, "other streams stay", "keep")
	if p := x.partitions("done"); len(p) != 0 {
		x.Fatalf("Partitions of a deleted stream = %v, want none", p)
	}
}

func esDeleteRunningRefused(x *esT) {
	x.create("r", eventstore.StatusRunning)
	_, err := x.s.Delete(x.Context(), []string{"r"}, eventstore.DeleteOptions{})
	x.wantErr(err, eventstore.ErrRunning, "Delete(running)", "a running stream needs Force")
	re, ok := errors.AsType[*eventstore.RefusedError](err)
	if !ok || re.Stream != "r" || !strings.Contains(err.Error(), "running") {
		x.Fatalf("error %v is not a *RefusedError naming stream r and saying it is running", err)
	}
	x.wantExists("a refused delete deletes nothing", "r")
	x.wantDeleted(x.delete([]string{"r"}, eventstore.DeleteOptions{Force: true}), 1, 1, "Force deletes a running stream", "r")
}

func esDeleteUnknown(x *esT) {
	x.create("done", eventstore.StatusCompleted)
	_, err := x.s.Delete(x.Context(), []string{"done", "does-not-exist-12345"}, eventstore.DeleteOptions{Force: true})
	x.wantErr(err, eventstore.ErrNotFound, "Delete(known, unknown)", "an unknown stream fails the call")
	if nf, ok := errors.AsType[*eventstore.NotFoundError](err); !ok || nf.Stream != "does-not-exist-12345" || !strings.Contains(err.Error(), "not found") {
		x.Fatalf("error %v is not a *NotFoundError naming the unknown stream", err)
	}
	x.wantExists("the call is atomic: nothing is deleted", "done")
}

// tree makes root → c1, c2; c1 → gc, each with one event and the given status.
func (x *esT) tree(status eventstore.Status) {
	x.Helper()
	x.create("root", status)
	x.child("c1", "root", status)
	x.child("c2", "root", status)
	x.child("gc", "c1", status)
}

func esDeleteCascade(x *esT) {
	x.tree(eventstore.StatusCompleted)
	for _, s := range []string{"c1", "gc"} {
		for _, force := range []bool{false, true} {
			_, err := x.s.Delete(x.Context(), []string{s}, eventstore.DeleteOptions{Force: force})
			x.wantErr(err, eventstore.ErrNotRoot, fmt.Sprintf("Delete(%s, force %v)", s, force), "a child is deleted through its root")
			re, ok := errors.AsType[*eventstore.RefusedError](err)
			if !ok || re.Stream != s || !strings.Contains(err.Error(), "root") {
				x.Fatalf("error %v is not a *RefusedError naming %s and pointing at the root", err, s)
			}
		}
	}
	x.wantExists("refused deletes delete nothing", "root", "c1", "c2", "gc")
	x.wantDeleted(x.delete([]string{"root"}, eventstore.DeleteOptions{}), 4, 4, "deleting a root cascades", "root", "c1", "c2", "gc")
}

func esDeleteAllowNonRoot(x *esT) {
	x.tree(eventstore.StatusCompleted)
	x.wantDeleted(x.delete([]string{"c1"}, eventstore.DeleteOptions{AllowNonRoot: true}), 2, 2,
		"AllowNonRoot deletes the child and its descendants", "c1", "gc")
	x.wantExists("the rest of the tree stays", "root", "c2")
	x.wantList(eventstore.StreamFilter{Parent: "root"}, "the root keeps its other child", "c2")
	x.wantDeleted(x.delete([]string{"root", "c2"}, eventstore.DeleteOptions{}), 2, 2,
		"a child listed with its parent needs no AllowNonRoot", "root", "c2")
}

func esDeleteRunningDescendant(x *esT) {
	x.tree(eventstore.StatusCompleted)
	x.end("gc", 1, eventstore.StatusRunning)
	_, err := x.s.Delete(x.Context(), []string{"root"}, eventstore.DeleteOptions{})
	x.wantErr(err, eventstore.ErrRunning, "Delete(root with a running grandchild)", "Force covers the whole cascade")
	if re, ok := errors.AsType[*eventstore.RefusedError](err); !ok || re.Stream != "gc" {
		x.Fatalf("error %v does not name the running descendant gc", err)
	}
	x.wantExists("nothing is deleted", "root", "c1", "c2", "gc")
	x.wantDeleted(x.delete([]string{"root"}, eventstore.DeleteOptions{Force: true}), 4, 4, "Force deletes it all", "root", "c1", "c2", "gc")
}

func esDeleteSeveral(x *esT) {
	for _, s := range []string{"a", "b", "c"} {
		x.create(s, eventstore.StatusCompleted)
	}
	x.wantDeleted(x.delete([]string{"c", "a", "b", "a"}, eventstore.DeleteOptions{}), 3, 3,
		"several streams in one call; duplicates count once", "a", "b", "c")
}

func esDeleteMixedForce(x *esT) {
	x.create("done", eventstore.StatusCompleted)
	x.create("running", eventstore.StatusRunning)
	_, err := x.s.Delete(x.Context(), []string{"done", "running"}, eventstore.DeleteOptions{})
	x.wantErr(err, eventstore.ErrRunning, "Delete(done, running)", "one running stream refuses the call")
	x.wantExists("nothing is deleted", "done", "running")
	x.wantDeleted(x.delete([]string{"done", "running"}, eventstore.DeleteOptions{Force: true}), 2, 2, "Force", "done", "running")
}

func esDeleteDanglingParent(x *esT) {
	x.child("orphan", "never-created", eventstore.StatusCompleted)
	x.wantDeleted(x.delete([]string{"orphan"}, eventstore.DeleteOptions{}), 1, 1,
		"a parent link to no stream does not make a stream undeletable", "orphan")
}

func esDeleteRecreate(x *esT) {
	x.chain("s", 2, eventstore.StatusCompleted)
	x.update("s", eventstore.StreamUpdate{Partition: 2, Name: esPtr("Old"), Parent: esPtr("p")})
	x.setCustomStatus("s", esPtr("cs"), 1)
	x.applyKV("s", 2, esSet("k", "v"))
	x.delete([]string{"s"}, eventstore.DeleteOptions{AllowNonRoot: true})
	x.append("s", 1, 1)
	info := x.info("s")
	want := eventstore.StreamInfo{Stream: "s", Status: eventstore.StatusRunning, CurrentPartition: 1,
		CreatedAt: x.clock.Now(), UpdatedAt: x.clock.Now()}
	if !esSameInfo(info, want) {
		x.Fatalf("re-created stream = %+v, want fresh metadata %+v", info, want)
	}
	x.wantPartitions("s", "a re-created stream starts from scratch", 1)
	x.wantSeqs("s", 1, "a re-created stream starts from scratch", 1)
	x.wantKVAll("s", "a re-created stream starts from scratch", map[string]string{})
}

func esDeleteWhereByIDs(x *esT) {
	for i := range 5 {
		x.create(fmt.Sprintf("s%d", i), eventstore.StatusCompleted)
	}
	x.create("running", eventstore.StatusRunning)
	r := x.deleteWhere(eventstore.StreamFilter{Streams: []string{"s0", "s1"}})
	x.wantDeleted(r, 2, 2, "filter by ids", "s0", "s1")
	x.wantExists("other streams stay", "s2")
	r = x.deleteWhere(eventstore.StreamFilter{Streams: []string{"nope-1", "nope-2"}})
	x.wantDeleted(r, 0, 0, "unknown ids delete nothing")
	r = x.deleteWhere(eventstore.StreamFilter{})
	x.wantDeleted(r, 3, 3, "the empty filter deletes every ended root", "s2", "s3", "s4")
	x.wantExists("running streams are skipped silently", "running")
}

func esDeleteWhereSafety(x *esT) {
	x.create("done1", eventstore.StatusCompleted)
	x.create("done2", eventstore.StatusFailed)
	x.create("run1", eventstore.StatusRunning)
	x.create("run2", eventstore.StatusRunning)
	r := x.deleteWhere(eventstore.StreamFilter{Streams: []string{"done1", "done2", "run1", "run2"}})
	x.wantDeleted(r, 2, 2, "running streams are skipped", "done1", "done2")
	x.wantExists("running streams stay", "run1", "run2")
	batch := []string{"b1", "b2", "b3", "b4"}
	for _, s := range batch {
		x.create(s, eventstore.StatusCompleted)
	}
	x.wantDeleted(x.deleteWhere(eventstore.StreamFilter{Streams: batch, Limit: 2}), 2, 2, "the limit bounds the roots deleted", "b1", "b2")
	x.wantDeleted(x.deleteWhere(eventstore.StreamFilter{Streams: batch, Limit: 2}), 2, 2, "the next batch", "b3", "b4")
	x.wantDeleted(x.deleteWhere(eventstore.StreamFilter{Streams: batch, Limit: 2}), 0, 0, "nothing left")
	x.create("f", eventstore.StatusFailed)
	x.create("c", eventstore.StatusCompleted)
	x.wantDeleted(x.deleteWhere(eventstore.StreamFilter{Status: eventstore.StatusFailed}), 1, 1, "by status", "f")
}

func esDeleteWhereCompletedBefore(x *esT) {
	x.create("old", eventstore.StatusRunning)
	x.create("old2", eventstore.StatusRunning)
	x.clock.Advance(time.Hour)
	x.end("old", 1, eventstore.StatusCompleted)
	x.end("old2", 1, eventstore.StatusCompleted)
	done := x.clock.Now()
	x.clock.Advance(time.Hour)
	x.create("new", eventstore.StatusCompleted)
	r := x.deleteWhere(eventstore.StreamFilter{CompletedBefore: done.Add(-10 * time.Millisecond)})
	x.wantDeleted(r, 0, 0, "nothing completed before that")
	r = x.deleteWhere(eventstore.StreamFilter{CompletedBefore: done.Add(10 * time.Millisecond)})
	x.wantDeleted(r, 2, 2, "completed before the cutoff", "old", "old2")
	x.wantExists("completed after the cutoff", "new")
}

func esDeleteWhereCascades(x *esT) {
	x.create("parent1", eventstore.StatusCompleted)
	x.child("p1c1", "parent1", eventstore.StatusCompleted)
	x.create("parent2", eventstore.StatusCompleted)
	for i := range 3 {
		x.child(fmt.Sprintf("p2c%d", i), "parent2", eventstore.StatusCompleted)
	}
	x.create("standalone", eventstore.StatusCompleted)
	r := x.deleteWhere(eventstore.StreamFilter{Streams: []string{"parent1", "parent2", "standalone"}})
	x.wantDeleted(r, 7, 7, "roots cascade to their children, counted",
		"parent1", "p1c1", "parent2", "p2c0", "p2c1", "p2c2", "standalone")
}

func esDeleteWhereRootsOnly(x *esT) {
	x.create("root", eventstore.StatusCompleted)
	x.child("kid", "root", eventstore.StatusCompleted)
	x.wantDeleted(x.deleteWhere(eventstore.StreamFilter{Streams: []string{"kid"}}), 0, 0, "children are never selected on their own")
	x.create("root2", eventstore.StatusCompleted)
	x.child("kid2", "root2", eventstore.StatusRunning)
	x.wantDeleted(x.deleteWhere(eventstore.StreamFilter{Streams: []string{"root2"}}), 0, 0, "a tree with a running stream is skipped")
	x.wantExists("skipped trees stay", "root", "kid", "root2", "kid2")
}

// --- prune ---

func (x *esT) wantPruned(r eventstore.PruneResult, streams int, partitions, events int64, rule string) {
	x.Helper()
	if r.Streams != streams || r.Partitions != partitions || r.Events != events {
		x.Fatalf("prune result = %+v, want %d streams, %d partitions, %d events (%s)", r, streams, partitions, events, rule)
	}
}

func esPruneKeepLast(x *esT) {
	x.chain("s", 4, eventstore.StatusCompleted)
	x.wantPruned(x.prune("s", eventstore.PruneOptions{KeepLast: 2}), 1, 2, 2, "keep the newest 2 of 4")
	x.wantPartitions("s", "the newest partitions stay", 3, 4)
	x.wantSeqs("s", 1, "a pruned partition reads empty")
	x.wantSeqs("s", 3, "kept partitions keep their events", 3)
	x.chain("t", 3, eventstore.StatusCompleted)
	x.wantPruned(x.prune("t", eventstore.PruneOptions{}), 1, 2, 2, "no options: only the current partition stays")
	x.wantPartitions("t", "only the current partition stays", 3)
}

func esPruneSafety(x *esT) {
	for _, keep := range []int{0, 1} {
		s := fmt.Sprintf("keep%d", keep)
		x.chain(s, 4, eventstore.StatusCompleted)
		x.wantPruned(x.prune(s, eventstore.PruneOptions{KeepLast: keep}), 1, 3, 3, fmt.Sprintf("KeepLast %d", keep))
		x.wantPartitions(s, "the current partition is never pruned", 4)
		if p, _ := x.s.LatestPartition(x.Context(), s); p != 4 {
			x.Fatalf("LatestPartition = %d after pruning, want 4", p)
		}
	}
	x.create("one", eventstore.StatusCompleted)
	x.wantPruned(x.prune("one", eventstore.PruneOptions{CompletedBefore: esEpoch.Add(time.Hour)}), 1, 0, 0,
		"an ended current partition is still current")
	_, err := x.s.Prune(x.Context(), "nobody", eventstore.PruneOptions{})
	x.wantErr(err, eventstore.ErrNotFound, "Prune(unknown)", "pruning an unknown stream is an error")
}

func esPruneRunningStream(x *esT) {
	x.chain("s", 3, eventstore.StatusRunning)
	x.wantPruned(x.prune("s", eventstore.PruneOptions{KeepLast: 1}), 1, 2, 2, "a running stream's old partitions")
	x.wantPartitions("s", "the running partition stays", 3)
	if info := x.info("s"); info.Status != eventstore.StatusRunning || info.CurrentPartition != 3 {
		x.Fatalf("Stream = %+v after prune, want Running in partition 3", info)
	}
	x.append("s", 3, 4)
	x.wantSeqs("s", 3, "the stream goes on", 3, 4)
	if st := x.stats("s"); st.Events != 2 {
		x.Fatalf("Stats.Events = %d, want 2", st.Events)
	}
}

func esPruneCompletedBefore(x *esT) {
	// chain advances the clock a second before each partition ends: partition p
	// ends at epoch + p seconds.
	x.chain("s", 4, eventstore.StatusRunning)
	at := func(p int) time.Time { return esEpoch.Add(time.Duration(p) * time.Second) }
	if parts := x.partitions("s"); !parts[0].CompletedAt.Equal(at(1)) || !parts[2].CompletedAt.Equal(at(3)) {
		x.Fatalf("partitions = %+v, want partition 1 completed at %v and 3 at %v", parts, at(1), at(3))
	}
	x.wantPruned(x.prune("s", eventstore.PruneOptions{CompletedBefore: at(1).Add(time.Millisecond)}), 1, 1, 1,
		"only partitions that ended before the cutoff")
	x.wantPartitions("s", "partition 1 ended before the cutoff", 2, 3, 4)
	x.wantPruned(x.prune("s", eventstore.PruneOptions{CompletedBefore: at(3)}), 1, 1, 1, "ending at the cutoff is not before it")
	x.wantPartitions("s", "partition 2 ended before the cutoff, 3 at it", 3, 4)
	x.chain("t", 4, eventstore.StatusRunning)
	x.wantPruned(x.prune("t", eventstore.PruneOptions{KeepLast: 3, CompletedBefore: esEpoch.Add(time.Hour)}), 1, 1, 1,
		"both conditions must hold")
	x.wantPartitions("t", "keep the newest 3", 2, 3, 4)
}

func esPruneRunningPartitionKept(x *esT) {
	x.append("s", 1, 1)
	x.append("s", 2, 1)
	x.end("s", 2, eventstore.StatusCompleted)
	x.wantPruned(x.prune("s", eventstore.PruneOptions{}), 1, 0, 0, "a Running partition is never pruned")
	x.wantPartitions("s", "the running partition 1 stays", 1, 2)
}

func esPruneWhere(x *esT) {
	for i := range 3 {
		x.chain(fmt.Sprintf("s%d", i), 4, eventstore.StatusCompleted)
	}
	r, err := x.s.PruneWhere(x.Context(), eventstore.StreamFilter{Streams: []string{"s0", "s1"}}, eventstore.PruneOptions{KeepLast: 1})
	x.ok(err, "PruneWhere")
	x.wantPruned(r, 2, 6, 6, "two streams examined, three partitions each")
	x.wantPartitions("s0", "pruned", 4)
	x.wantPartitions("s1", "pruned", 4)
	x.wantPartitions("s2", "not selected", 1, 2, 3, 4)
}

func esPruneWhereRunning(x *esT) {
	x.chain("r", 3, eventstore.StatusRunning)
	r, err := x.s.PruneWhere(x.Context(), eventstore.StreamFilter{}, eventstore.PruneOptions{KeepLast: 1})
	x.ok(err, "PruneWhere")
	x.wantPruned(r, 1, 2, 2, "running streams are pruned too")
	x.wantPartitions("r", "only the current partition", 3)
	if info := x.info("r"); info.Status != eventstore.StatusRunning {
		x.Fatalf("status = %q, want Running", info.Status)
	}
}

// --- stats ---

func esStatsUnknown(x *esT) {
	_, err := x.s.Stats(x.Context(), "nobody")
	x.wantErr(err, eventstore.ErrNotFound, "Stats(unknown)", "an unknown stream has no stats")
}

func esStatsEvents(x *esT) {
	x.ok(x.s.Append(x.Context(), "s", 1, []eventstore.Event{{Seq: 1, Data: []byte("abc")}, {Seq: 2, Data: []byte("defgh")}}), "Append")
	if st := x.stats("s"); st != (eventstore.Stats{Partition: 1, Events: 2, EventBytes: 8}) {
		x.Fatalf("Stats = %+v, want partition 1, 2 events, 8 bytes", st)
	}
	x.end("s", 1, eventstore.StatusContinuedAsNew)
	x.ok(x.s.Append(x.Context(), "s", 2, []eventstore.Event{{Seq: 1, Data: []byte("z")}}), "Append")
	if st := x.stats("s"); st != (eventstore.Stats{Partition: 2, Events: 1, EventBytes: 1}) {
		x.Fatalf("Stats = %+v, want the current partition only: partition 2, 1 event, 1 byte", st)
	}
}

func esStatsKV(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("delta", "12345"))
	if st := x.stats("s"); st.KVKeys != 1 || st.KVValueBytes != 5 {
		x.Fatalf("Stats = %+v, want 1 key of 5 bytes (keys only in the delta count)", st)
	}
	x.applyKV("s", 1, esSet("gone", "xx"), esSet("stay", "abc"))
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esClear("gone"), esSet("delta", "1"), esSet("new", ""))
	if st := x.stats("s"); st.KVKeys != 3 || st.KVValueBytes != 4 {
		x.Fatalf("Stats = %+v, want 3 keys of 4 bytes (merged view: delta over store, tombstones excluded)", st)
	}
}

func esTotals(x *esT) {
	t, err := x.s.Totals(x.Context())
	x.ok(err, "Totals")
	if t.Streams != 0 || t.Partitions != 0 || t.Events != 0 || len(t.ByStatus) != 0 {
		x.Fatalf("Totals of an empty store = %+v, want zeros", t)
	}
	x.chain("a", 2, eventstore.StatusCompleted)
	x.append("b", 1, 1, 2, 3)
	x.create("c", eventstore.StatusFailed)
	t, err = x.s.Totals(x.Context())
	x.ok(err, "Totals")
	want := map[eventstore.Status]int64{eventstore.StatusCompleted: 1, eventstore.StatusRunning: 1, eventstore.StatusFailed: 1}
	if t.Streams != 3 || t.Partitions != 4 || t.Events != 6 || !maps.Equal(t.ByStatus, want) {
		x.Fatalf("Totals = %+v, want 3 streams, 4 partitions, 6 events, %v", t, want)
	}
}
