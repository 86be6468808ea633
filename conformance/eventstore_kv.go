package conformance

import (
	"errors"
	"strings"
	"time"

	"github.com/duroq/duroq/eventstore"
)

// The KV cases follow duroxide's kv_store validation module (anchor §4.19) at the
// store level: "ack with KeyValueSet" is ApplyKV, "the execution completes" is an
// Update with a status that ends the partition, "fetch kv_snapshot" is KVSnapshot and
// "client read" is KVGet/KVAll.
var esKVCases = []esCase{
	{"KV/SetAndGet", esKVSetAndGet},
	{"KV/Overwrite", esKVOverwrite},
	{"KV/ClearSingle", esKVClearSingle},
	{"KV/ClearAll", esKVClearAll},
	{"KV/MissingKey", esKVMissingKey},
	{"KV/SnapshotAfterCompletion", esKVSnapshotAfterCompletion},
	{"KV/SnapshotAfterClearSingle", esKVSnapshotAfterClearSingle},
	{"KV/SnapshotAfterClearAll", esKVSnapshotAfterClearAll},
	{"KV/PartitionTracking", esKVPartitionTracking},
	{"KV/CrossPartitionOverwrite", esKVCrossPartitionOverwrite},
	{"KV/CrossPartitionRemoveReadd", esKVCrossPartitionRemoveReadd},
	{"KV/PrunePreservesOverwritten", esKVPrunePreservesOverwritten},
	{"KV/PrunePreservesAllKeys", esKVPrunePreservesAllKeys},
	{"KV/StreamIsolation", esKVStreamIsolation},
	{"KV/DeleteCascades", esKVDeleteCascades},
	{"KV/ClearNonexistentKey", esKVClearNonexistentKey},
	{"KV/UnknownStream", esKVUnknownStream},
	{"KV/SetAfterClearAllInOneCall", esKVSetAfterClearAll},
	{"KV/EmptyValue", esKVEmptyValue},
	{"KV/LargeValue", esKVLargeValue},
	{"KV/SpecialCharacterKeys", esKVSpecialKeys},
	{"KV/SnapshotEmpty", esKVSnapshotEmpty},
	{"KV/SnapshotCrossPartition", esKVSnapshotCrossPartition},
	{"KV/PruneCurrentPartitionProtected", esKVPruneCurrentProtected},
	{"KV/DeleteWithChildren", esKVDeleteWithChildren},
	{"KV/ClearAllIsolation", esKVClearAllIsolation},
	{"KV/SnapshotExcludesCurrentPartition", esKVSnapshotExcludesCurrent},
	{"KV/SnapshotIncludesEndedPartition", esKVSnapshotIncludesEnded},
	{"KV/ReadsMergeDeltaOverStore", esKVReadsMerged},
	{"KV/TombstoneOverridesStore", esKVTombstoneOverridesStore},
	{"KV/ClearAllTombstonesStore", esKVClearAllTombstonesStore},
	{"KV/MergedOnCompletion", esKVMergedOnCompletion},
	{"KV/MergedOnContinueAsNew", esKVMergedOnCAN},
	{"KV/MergedOnFailure", esKVMergedOnFailure},
	{"KV/DeltaOnlyDeleteCascades", esKVDeltaOnlyDeleteCascades},
	{"KV/PruneUntouchedKeySurvives", esKVPruneUntouchedKeySurvives},
	{"KV/Timestamps", esKVTimestamps},
	{"KV/MutationsRollBackTogether", esKVMutationsAtomic},
}

// kvStream makes a running stream in partition 1 for the KV cases.
func (x *esT) kvStream(stream string) {
	x.Helper()
	x.append(stream, 1, 1)
}

// nextPartition ends partition p with ContinuedAsNew and starts p+1.
func (x *esT) nextPartition(stream string, p int64) {
	x.Helper()
	x.end(stream, p, eventstore.StatusContinuedAsNew)
	x.append(stream, p+1, 1)
}

func esKVSetAndGet(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("counter", "42"))
	x.wantKV("s", "counter", "42", "a set key is readable")
	e, _ := x.kvGet("s", "counter")
	if e.Partition != 1 || !e.UpdatedAt.Equal(esEpoch) {
		x.Fatalf("entry = %+v, want partition 1 and the store's clock", e)
	}
}

func esKVOverwrite(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "old"))
	x.applyKV("s", 1, esSet("k", "new"))
	x.wantKV("s", "k", "new", "the last write wins")
}

func esKVClearSingle(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "v"), esSet("other", "o"))
	x.applyKV("s", 1, esClear("k"))
	x.wantNoKV("s", "k", "a cleared key is gone")
	x.wantKV("s", "other", "o", "clearing one key leaves the others")
}

func esKVClearAll(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("a", "1"), esSet("b", "2"))
	x.applyKV("s", 1, esClearAll())
	x.wantNoKV("s", "a", "clear-all removes every key")
	x.wantNoKV("s", "b", "clear-all removes every key")
	x.wantKVAll("s", "clear-all removes every key", map[string]string{})
}

func esKVMissingKey(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("a", "1"))
	x.wantNoKV("s", "missing", "an unknown key is absent, not an error")
}

func esKVSnapshotAfterCompletion(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("x", "10"), esSet("y", "20"))
	x.end("s", 1, eventstore.StatusCompleted)
	x.wantSnapshot("s", "an ended partition's keys are in the snapshot", map[string]string{"x": "10", "y": "20"})
	for k, e := range x.snapshot("s") {
		if e.Partition != 1 || !e.UpdatedAt.Equal(esEpoch) {
			x.Fatalf("snapshot[%q] = %+v, want partition 1 and time %v", k, e, esEpoch)
		}
	}
}

func esKVSnapshotAfterClearSingle(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("keep", "yes"), esSet("remove", "no"))
	x.applyKV("s", 1, esClear("remove"))
	x.end("s", 1, eventstore.StatusCompleted)
	x.wantSnapshot("s", "a cleared key does not reach the store", map[string]string{"keep": "yes"})
}

// esKVSnapshotAfterClearAll: a clear-all removes the keys of the delta and those an
// earlier partition took to the store; a key set after it stays.
func esKVSnapshotAfterClearAll(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("a", "1"), esSet("b", "2"))
	x.applyKV("s", 1, esClearAll())
	x.wantSnapshot("s", "nothing reached the store", map[string]string{})
	x.end("s", 1, eventstore.StatusCompleted)
	x.wantSnapshot("s", "cleared keys do not reach the store", map[string]string{})

	x.kvStream("t")
	x.applyKV("t", 1, esSet("a", "1"), esSet("b", "2"))
	x.nextPartition("t", 1)
	x.wantSnapshot("t", "an ended partition takes its keys to the store", map[string]string{"a": "1", "b": "2"})
	x.applyKV("t", 2, esClearAll(), esSet("c", "3"))
	x.wantSnapshot("t", "the clear-all has not reached the store yet", map[string]string{"a": "1", "b": "2"})
	x.end("t", 2, eventstore.StatusCompleted)
	x.wantSnapshot("t", "a clear-all removes the stored keys, not one set after it", map[string]string{"c": "3"})
}

func esKVPartitionTracking(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("shared", "from_1"))
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esSet("shared", "from_2"))
	x.prune("s", eventstore.PruneOptions{KeepLast: 1})
	x.wantKV("s", "shared", "from_2", "the newest write survives pruning")
	if e, _ := x.kvGet("s", "shared"); e.Partition != 2 {
		x.Fatalf("entry partition = %d, want 2 (the partition that wrote it)", e.Partition)
	}
}

func esKVCrossPartitionOverwrite(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "v1"))
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esSet("k", "v2"))
	x.wantKV("s", "k", "v2", "a later partition's write wins")
}

func esKVCrossPartitionRemoveReadd(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "one"))
	x.wantKV("s", "k", "one", "set in partition 1")
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esClear("k"))
	x.wantNoKV("s", "k", "cleared in partition 2")
	x.nextPartition("s", 2)
	x.wantNoKV("s", "k", "the clear was merged")
	x.applyKV("s", 3, esSet("k", "three"))
	x.wantKV("s", "k", "three", "set again in partition 3")
}

func esKVPrunePreservesOverwritten(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "v1"))
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esSet("k", "v2"))
	x.nextPartition("s", 2)
	x.prune("s", eventstore.PruneOptions{KeepLast: 1})
	x.wantPartitions("s", "pruned to the current partition", 3)
	x.wantKV("s", "k", "v2", "pruning keeps KV state")
}

func esKVPrunePreservesAllKeys(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("orphan", "from_1"))
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esSet("other", "from_2"))
	x.nextPartition("s", 2)
	x.prune("s", eventstore.PruneOptions{KeepLast: 1})
	x.wantKV("s", "orphan", "from_1", "a key lives as long as its stream, not its partition")
	x.wantKV("s", "other", "from_2", "a key lives as long as its stream")
}

func esKVStreamIsolation(x *esT) {
	x.kvStream("a")
	x.kvStream("b")
	x.applyKV("a", 1, esSet("k", "a"))
	x.applyKV("b", 1, esSet("k", "b"))
	x.wantKV("a", "k", "a", "streams keep their own keys")
	x.wantKV("b", "k", "b", "streams keep their own keys")
}

func esKVDeleteCascades(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "v"))
	x.end("s", 1, eventstore.StatusCompleted)
	x.delete([]string{"s"}, eventstore.DeleteOptions{})
	x.wantNoKV("s", "k", "deleting a stream deletes its keys")
	x.wantSnapshot("s", "deleting a stream deletes its store", map[string]string{})
	x.kvStream("s")
	x.wantKVAll("s", "a re-created stream starts without keys", map[string]string{})
}

func esKVClearNonexistentKey(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esClear("never-set"))
	x.wantNoKV("s", "never-set", "clearing an unknown key is harmless")
	x.end("s", 1, eventstore.StatusCompleted)
	x.wantSnapshot("s", "clearing an unknown key is harmless", map[string]string{})
}

func esKVUnknownStream(x *esT) {
	x.wantNoKV("nobody", "k", "an unknown stream has no keys")
	x.wantSnapshot("nobody", "an unknown stream has no keys", map[string]string{})
	err := x.s.ApplyKV(x.Context(), "nobody", 1, []eventstore.KVMutation{esSet("k", "v")})
	x.wantErr(err, eventstore.ErrNotFound, "ApplyKV(unknown stream)", "KV state belongs to an existing stream")
	if nf, ok := errors.AsType[*eventstore.NotFoundError](err); !ok || nf.Stream != "nobody" {
		x.Fatalf("error %v does not name the stream", err)
	}
	if x.exists("nobody") {
		x.Fatal("ApplyKV created a stream")
	}
}

func esKVSetAfterClearAll(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("old_a", "1"), esSet("old_b", "2"))
	x.applyKV("s", 1, esClearAll(), esSet("new_x", "x"))
	x.wantNoKV("s", "old_a", "mutations apply in order: clear-all first")
	x.wantNoKV("s", "old_b", "mutations apply in order: clear-all first")
	x.wantKV("s", "new_x", "x", "mutations apply in order: then the set")
	x.applyKV("s", 1, esSet("y", "1"), esClearAll())
	x.wantKVAll("s", "a clear-all after a set removes it", map[string]string{})
}

func esKVEmptyValue(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("empty", ""))
	x.wantKV("s", "empty", "", "an empty value is a value, not an absence")
	x.end("s", 1, eventstore.StatusCompleted)
	if e, ok := x.snapshot("s")["empty"]; !ok || e.Value != "" {
		x.Fatal("an empty value must reach the store as a value")
	}
}

func esKVLargeValue(x *esT) {
	x.kvStream("s")
	v16 := strings.Repeat("0123456789abcdef", 1024)
	x.applyKV("s", 1, esSet("big", v16))
	x.wantKV("s", "big", v16, "a 16 KiB value round-trips")
	maxValue := strings.Repeat("m", eventstore.MaxValueSize)
	x.applyKV("s", 1, esSet("max", maxValue))
	x.end("s", 1, eventstore.StatusCompleted)
	if e := x.snapshot("s")["max"]; e.Value != maxValue {
		x.Fatalf("a value of MaxValueSize bytes came back with %d bytes", len(e.Value))
	}
	err := x.s.ApplyKV(x.Context(), "s", 1, []eventstore.KVMutation{esSet("over", maxValue+"!")})
	x.wantErr(err, eventstore.ErrTooLarge, "ApplyKV(MaxValueSize+1)", "values beyond MaxValueSize are refused")
}

func esKVSpecialKeys(x *esT) {
	x.kvStream("s")
	keys := []string{"key with spaces", "日本語キー", "dots.in.key", "slashes/in/key", "emoji🎉", "quote'\"", "%_"}
	var muts []eventstore.KVMutation
	for _, k := range keys {
		muts = append(muts, esSet(k, "v:"+k))
	}
	x.applyKV("s", 1, muts...)
	for _, k := range keys {
		x.wantKV("s", k, "v:"+k, "keys are opaque strings")
	}
	x.wantNoKV("s", "%", "keys are matched exactly")
}

func esKVSnapshotEmpty(x *esT) {
	x.kvStream("s")
	x.wantSnapshot("s", "a stream without keys has an empty snapshot", map[string]string{})
	x.wantKVAll("s", "a stream without keys", map[string]string{})
}

func esKVSnapshotCrossPartition(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("A", "a"))
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esSet("B", "b"))
	x.wantSnapshot("s", "the snapshot holds ended partitions only", map[string]string{"A": "a"})
	x.wantKVAll("s", "readers see both", map[string]string{"A": "a", "B": "b"})
}

func esKVPruneCurrentProtected(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "v"))
	r := x.prune("s", eventstore.PruneOptions{KeepLast: 1})
	if r.Partitions != 0 {
		x.Fatalf("Prune removed %d partitions of a single-partition stream", r.Partitions)
	}
	x.wantKV("s", "k", "v", "the current partition's keys stay")
}

func esKVDeleteWithChildren(x *esT) {
	x.kvStream("parent")
	x.child("child", "parent", eventstore.StatusRunning)
	x.applyKV("parent", 1, esSet("k", "p"))
	x.applyKV("child", 1, esSet("k", "c"))
	x.end("parent", 1, eventstore.StatusCompleted)
	x.end("child", 1, eventstore.StatusCompleted)
	x.delete([]string{"parent"}, eventstore.DeleteOptions{})
	x.wantNoKV("parent", "k", "the parent's keys go with it")
	x.wantNoKV("child", "k", "the child's keys go with the cascade")
}

func esKVClearAllIsolation(x *esT) {
	x.kvStream("a")
	x.kvStream("b")
	x.applyKV("a", 1, esSet("k", "a"))
	x.applyKV("b", 1, esSet("k", "b"))
	x.end("b", 1, eventstore.StatusContinuedAsNew)
	x.append("b", 2, 1)
	x.applyKV("a", 1, esClearAll())
	x.wantKV("b", "k", "b", "clear-all touches its own stream only")
	x.wantSnapshot("b", "clear-all touches its own stream only", map[string]string{"k": "b"})
}

func esKVSnapshotExcludesCurrent(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("counter", "1"))
	x.wantKV("s", "counter", "1", "readers see the current partition's write")
	x.wantSnapshot("s", "the snapshot leaves out the current partition (replay rebuilds it)", map[string]string{})
}

func esKVSnapshotIncludesEnded(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("counter", "5"))
	x.nextPartition("s", 1)
	x.wantSnapshot("s", "continue-as-new carries the state", map[string]string{"counter": "5"})
}

func esKVReadsMerged(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("color", "red"), esSet("size", "large"))
	x.end("s", 1, eventstore.StatusCompleted)
	x.append("s", 2, 1)
	x.applyKV("s", 2, esSet("color", "blue"), esSet("shape", "circle"))
	x.wantKV("s", "color", "blue", "the delta overrides the store")
	x.wantKV("s", "size", "large", "store keys show through")
	x.wantKV("s", "shape", "circle", "delta keys show")
	x.wantKVAll("s", "merged view", map[string]string{"color": "blue", "size": "large", "shape": "circle"})
}

func esKVTombstoneOverridesStore(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "v"))
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esClear("k"))
	x.wantNoKV("s", "k", "a tombstone hides the store's value")
	x.wantSnapshot("s", "the store still holds it until the partition ends", map[string]string{"k": "v"})
}

func esKVClearAllTombstonesStore(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("a", "1"), esSet("b", "2"))
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esClearAll(), esSet("c", "3"))
	x.wantNoKV("s", "a", "clear-all hides store keys")
	x.wantNoKV("s", "b", "clear-all hides store keys")
	x.wantKV("s", "c", "3", "a set after clear-all shows")
	x.end("s", 2, eventstore.StatusCompleted)
	x.wantSnapshot("s", "the merge applies the clear-all", map[string]string{"c": "3"})
}

func esKVMergedOnCompletion(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "v"))
	x.end("s", 1, eventstore.StatusCompleted)
	x.wantKV("s", "k", "v", "still readable after the merge")
	x.wantSnapshot("s", "completion merges", map[string]string{"k": "v"})
}

func esKVMergedOnCAN(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("version", "1"), esSet("progress", "10"))
	x.applyKV("s", 1, esSet("progress", "50"))
	x.nextPartition("s", 1)
	x.wantSnapshot("s", "continue-as-new merges the latest values", map[string]string{"version": "1", "progress": "50"})
}

func esKVMergedOnFailure(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "v"))
	x.end("s", 1, eventstore.StatusFailed)
	x.wantSnapshot("s", "failure ends the partition and merges", map[string]string{"k": "v"})
}

func esKVDeltaOnlyDeleteCascades(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("k", "v"))
	x.delete([]string{"s"}, eventstore.DeleteOptions{Force: true})
	x.wantNoKV("s", "k", "a forced delete removes the delta")
	x.kvStream("s")
	x.wantKVAll("s", "nothing of the old delta survives", map[string]string{})
}

func esKVPruneUntouchedKeySurvives(x *esT) {
	x.kvStream("s")
	x.applyKV("s", 1, esSet("stale_config", "c"))
	x.nextPartition("s", 1)
	x.applyKV("s", 2, esSet("other", "o"))
	x.nextPartition("s", 2)
	x.prune("s", eventstore.PruneOptions{KeepLast: 1})
	x.wantKV("s", "stale_config", "c", "a key written in a pruned partition survives")
	x.wantKV("s", "other", "o", "a key written in a pruned partition survives")
	x.wantSnapshot("s", "and it is in the snapshot", map[string]string{"stale_config": "c", "other": "o"})
}

func esKVTimestamps(x *esT) {
	x.kvStream("s")
	at := time.Date(2029, 5, 6, 7, 8, 9, 123456789, time.UTC)
	x.applyKV("s", 1, eventstore.KVMutation{Op: eventstore.KVSet, Key: "given", Value: "v", At: at})
	later := x.clock.Advance(time.Minute)
	x.applyKV("s", 1, esSet("clock", "v"))
	e, _ := x.kvGet("s", "given")
	if want := at.Truncate(time.Microsecond); !e.UpdatedAt.Equal(want) {
		x.Fatalf("UpdatedAt = %v, want the mutation's time %v (microsecond precision)", e.UpdatedAt, want)
	}
	if e, _ := x.kvGet("s", "clock"); !e.UpdatedAt.Equal(later) {
		x.Fatalf("UpdatedAt = %v, want the store's clock %v when the mutation has no time", e.UpdatedAt, later)
	}
	x.end("s", 1, eventstore.StatusCompleted)
	if e := x.snapshot("s")["given"]; !e.UpdatedAt.Equal(at.Truncate(time.Microsecond)) || e.Partition != 1 {
		x.Fatalf("merged entry = %+v, want the write's time and partition kept", e)
	}
}

func esKVMutationsAtomic(x *esT) {
	x.kvStream("s")
	err := x.s.ApplyKV(x.Context(), "s", 1, []eventstore.KVMutation{esSet("a", "1"), {Op: eventstore.KVSet}})
	x.wantErr(err, eventstore.ErrInvalid, "ApplyKV(valid, invalid)", "a bad mutation refuses the call")
	x.wantKVAll("s", "a refused call applies none of its mutations", map[string]string{})
}
