package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/eventstore"
)

// EventStoreFactory makes fresh, empty stores for TestEventStore.
type EventStoreFactory struct {
	// New returns a new, empty store that takes every timestamp from now (its
	// Options.Now). The suite closes it; Close is idempotent, so a factory may also
	// close it in a cleanup.
	New func(t *testing.T, now func() time.Time) eventstore.EventStore
	// Corrupt damages the stored event (stream, partition, seq) of s, as a disk or an
	// outside writer might, so that readers fail its integrity check. Nil skips the
	// corruption cases.
	Corrupt func(t *testing.T, s eventstore.EventStore, stream string, partition, seq int64)
}

// TestEventStore runs the eventstore.EventStore conformance suite against the stores
// f makes. Every case is a parallel subtest with a store and a fake clock of its own;
// no case sleeps.
func TestEventStore(t *testing.T, f EventStoreFactory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("conformance: EventStoreFactory.New is nil")
	}
	for _, group := range [][]esCase{
		esLogCases,
		esInputCases,
		esMetaCases,
		esCustomStatusCases,
		esKVCases,
		esDeleteCases,
		esPruneCases,
		esStatsCases,
	} {
		for _, c := range group {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(newESTest(t, f))
			})
		}
	}
}

// esCase is one subtest of TestEventStore.
type esCase struct {
	name string
	run  func(x *esT)
}

// esEpoch is where every case's clock starts.
var esEpoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// esClock is a fake clock that moves only when a case advances it.
type esClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *esClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and returns the new time.
func (c *esClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// esT is one case's test, store and clock. Its helpers fail the test on unexpected
// errors, naming the call and the rule at stake.
type esT struct {
	*testing.T
	s     eventstore.EventStore
	clock *esClock
	f     EventStoreFactory
}

func newESTest(t *testing.T, f EventStoreFactory) *esT {
	clock := &esClock{now: esEpoch}
	s := f.New(t, clock.Now)
	if s == nil {
		t.Fatal("conformance: EventStoreFactory.New returned a nil store")
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &esT{T: t, s: s, clock: clock, f: f}
}

func esPtr[T any](v T) *T { return &v }

// esData is the payload the helpers give event seq of stream/partition.
func esData(stream string, partition, seq int64) []byte {
	return fmt.Appendf(nil, "%s/%d/%d", stream, partition, seq)
}

func esEvents(stream string, partition int64, seqs ...int64) []eventstore.Event {
	out := make([]eventstore.Event, len(seqs))
	for i, seq := range seqs {
		out[i] = eventstore.Event{Seq: seq, Type: fmt.Sprintf("T%d", seq%3), Data: esData(stream, partition, seq)}
	}
	return out
}

func esRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func esSeqs(events []eventstore.Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.Seq
	}
	return out
}

// ok fails the test when err is not nil.
func (x *esT) ok(err error, call string) {
	x.Helper()
	if err != nil {
		x.Fatalf("%s: unexpected error: %v", call, err)
	}
}

// wantErr fails the test unless err matches target.
func (x *esT) wantErr(err, target error, call, rule string) {
	x.Helper()
	if err == nil {
		x.Fatalf("%s succeeded; want an error matching %v (%s)", call, target, rule)
	}
	if !errors.Is(err, target) {
		x.Fatalf("%s: error %q does not match %v (%s)", call, err, target, rule)
	}
}

// append appends the helper events with the given sequence numbers.
func (x *esT) append(stream string, partition int64, seqs ...int64) {
	x.Helper()
	x.ok(x.s.Append(x.Context(), stream, partition, esEvents(stream, partition, seqs...)),
		fmt.Sprintf("Append(%q, %d, seqs %v)", stream, partition, seqs))
}

// read reads a partition, which must decode.
func (x *esT) read(stream string, partition int64) []eventstore.Event {
	x.Helper()
	events, err := x.s.Read(x.Context(), stream, partition)
	x.ok(err, fmt.Sprintf("Read(%q, %d)", stream, partition))
	return events
}

// wantSeqs checks that a partition holds exactly the helper events seqs, in order.
func (x *esT) wantSeqs(stream string, partition int64, rule string, seqs ...int64) {
	x.Helper()
	events := x.read(stream, partition)
	if got := esSeqs(events); !slices.Equal(got, seqs) {
		x.Fatalf("Read(%q, %d) = seqs %v, want %v (%s)", stream, partition, got, seqs, rule)
	}
	for _, e := range events {
		if want := esData(stream, partition, e.Seq); !bytes.Equal(e.Data, want) {
			x.Fatalf("Read(%q, %d): event %d data %q, want %q (%s)", stream, partition, e.Seq, e.Data, want, rule)
		}
	}
}

func (x *esT) update(stream string, u eventstore.StreamUpdate) {
	x.Helper()
	x.ok(x.s.Update(x.Context(), stream, u), fmt.Sprintf("Update(%q, partition %d)", stream, u.Partition))
}

// end sets the status of a partition.
func (x *esT) end(stream string, partition int64, status eventstore.Status) {
	x.Helper()
	x.update(stream, eventstore.StreamUpdate{Partition: partition, Status: &status})
}

// create makes a stream with one event in partition 1 and the given status.
func (x *esT) create(stream string, status eventstore.Status) {
	x.Helper()
	x.append(stream, 1, 1)
	x.end(stream, 1, status)
}

// child makes a stream with one event whose parent is parent.
func (x *esT) child(stream, parent string, status eventstore.Status) {
	x.Helper()
	x.append(stream, 1, 1)
	x.update(stream, eventstore.StreamUpdate{Partition: 1, Parent: &parent, Status: &status})
}

func (x *esT) info(stream string) eventstore.StreamInfo {
	x.Helper()
	info, err := x.s.Stream(x.Context(), stream)
	x.ok(err, fmt.Sprintf("Stream(%q)", stream))
	return info
}

func (x *esT) partitions(stream string) []eventstore.PartitionInfo {
	x.Helper()
	parts, err := x.s.Partitions(x.Context(), stream)
	x.ok(err, fmt.Sprintf("Partitions(%q)", stream))
	return parts
}

// wantPartitions checks the numbers of a stream's stored partitions.
func (x *esT) wantPartitions(stream, rule string, want ...int64) {
	x.Helper()
	var got []int64
	for _, p := range x.partitions(stream) {
		got = append(got, p.Partition)
	}
	if !slices.Equal(got, want) {
		x.Fatalf("Partitions(%q) = %v, want %v (%s)", stream, got, want, rule)
	}
}

// list returns the ids ListStreams gives for f, checking that ListStreamInfos
// lists the same streams, each described as Stream describes it.
func (x *esT) list(f eventstore.StreamFilter) []string {
	x.Helper()
	ids, err := x.s.ListStreams(x.Context(), f)
	x.ok(err, fmt.Sprintf("ListStreams(%+v)", f))
	x.wantInfos(f, ids)
	return ids
}

// wantInfos checks that ListStreamInfos(f) describes exactly the streams ids, in
// order, as Stream does.
func (x *esT) wantInfos(f eventstore.StreamFilter, ids []string) []eventstore.StreamInfo {
	x.Helper()
	infos, err := x.s.ListStreamInfos(x.Context(), f)
	x.ok(err, fmt.Sprintf("ListStreamInfos(%+v)", f))
	listed := make([]string, len(infos))
	for i, info := range infos {
		listed[i] = info.Stream
	}
	if !slices.Equal(listed, ids) && !(len(listed) == 0 && len(ids) == 0) {
		x.Fatalf("ListStreamInfos(%+v) lists %q; ListStreams lists %q (the same streams, in id order)", f, listed, ids)
	}
	for _, info := range infos {
		if want := x.info(info.Stream); !esSameInfo(info, want) {
			x.Fatalf("ListStreamInfos(%+v) describes %q as %+v; Stream says %+v", f, info.Stream, info, want)
		}
	}
	return infos
}

func (x *esT) wantList(f eventstore.StreamFilter, rule string, want ...string) {
	x.Helper()
	if got := x.list(f); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		x.Fatalf("ListStreams(%+v) = %q, want %q (%s)", f, got, want, rule)
	}
}

// exists reports whether the store knows stream, checking that Stream and
// LatestPartition agree.
func (x *esT) exists(stream string) bool {
	x.Helper()
	_, err := x.s.Stream(x.Context(), stream)
	_, lerr := x.s.LatestPartition(x.Context(), stream)
	switch {
	case err == nil && lerr == nil:
		return true
	case errors.Is(err, eventstore.ErrNotFound) && errors.Is(lerr, eventstore.ErrNotFound):
		return false
	default:
		x.Fatalf("Stream(%q) = %v and LatestPartition = %v; want both nil or both ErrNotFound", stream, err, lerr)
		return false
	}
}

func (x *esT) wantExists(rule string, streams ...string) {
	x.Helper()
	for _, s := range streams {
		if !x.exists(s) {
			x.Fatalf("stream %q is gone (%s)", s, rule)
		}
	}
}

func (x *esT) wantGone(rule string, streams ...string) {
	x.Helper()
	for _, s := range streams {
		if x.exists(s) {
			x.Fatalf("stream %q still exists (%s)", s, rule)
		}
		if events := x.read(s, 1); len(events) != 0 {
			x.Fatalf("Read(%q, 1) of a deleted stream = %d events, want none (%s)", s, len(events), rule)
		}
		if kv := x.kvAll(s); len(kv) != 0 {
			x.Fatalf("KVAll(%q) of a deleted stream = %v, want empty (%s)", s, kv, rule)
		}
	}
}

func (x *esT) applyKV(stream string, partition int64, muts ...eventstore.KVMutation) {
	x.Helper()
	x.ok(x.s.ApplyKV(x.Context(), stream, partition, muts), fmt.Sprintf("ApplyKV(%q, %d, %d mutations)", stream, partition, len(muts)))
}

func esSet(key, value string) eventstore.KVMutation {
	return eventstore.KVMutation{Op: eventstore.KVSet, Key: key, Value: value}
}

func esClear(key string) eventstore.KVMutation {
	return eventstore.KVMutation{Op: eventstore.KVClear, Key: key}
}

func esClearAll() eventstore.KVMutation { return eventstore.KVMutation{Op: eventstore.KVClearAll} }

func (x *esT) kvGet(stream, key string) (eventstore.KVEntry, bool) {
	x.Helper()
	e, ok, err := x.s.KVGet(x.Context(), stream, key)
	x.ok(err, fmt.Sprintf("KVGet(%q, %q)", stream, key))
	return e, ok
}

// wantKV checks what readers see for key.
func (x *esT) wantKV(stream, key, want, rule string) {
	x.Helper()
	e, ok := x.kvGet(stream, key)
	if !ok {
		x.Fatalf("KVGet(%q, %q): absent, want %q (%s)", stream, key, want, rule)
	}
	if e.Value != want {
		x.Fatalf("KVGet(%q, %q) = %q, want %q (%s)", stream, key, e.Value, want, rule)
	}
	if all := x.kvAll(stream); all[key] != e {
		x.Fatalf("KVAll(%q)[%q] = %+v, KVGet = %+v; they must agree (%s)", stream, key, all[key], e, rule)
	}
}

func (x *esT) wantNoKV(stream, key, rule string) {
	x.Helper()
	if e, ok := x.kvGet(stream, key); ok {
		x.Fatalf("KVGet(%q, %q) = %q, want absent (%s)", stream, key, e.Value, rule)
	}
	if e, ok := x.kvAll(stream)[key]; ok {
		x.Fatalf("KVAll(%q) has %q = %q, want absent (%s)", stream, key, e.Value, rule)
	}
}

func (x *esT) kvAll(stream string) map[string]eventstore.KVEntry {
	x.Helper()
	kv, err := x.s.KVAll(x.Context(), stream)
	x.ok(err, fmt.Sprintf("KVAll(%q)", stream))
	return kv
}

func (x *esT) snapshot(stream string) map[string]eventstore.KVEntry {
	x.Helper()
	kv, err := x.s.KVSnapshot(x.Context(), stream)
	x.ok(err, fmt.Sprintf("KVSnapshot(%q)", stream))
	return kv
}

// wantSnapshot checks the keys and values of a stream's KV store.
func (x *esT) wantSnapshot(stream, rule string, want map[string]string) {
	x.Helper()
	snap := x.snapshot(stream)
	got := make(map[string]string, len(snap))
	for k, e := range snap {
		got[k] = e.Value
	}
	if !maps.Equal(got, want) {
		x.Fatalf("KVSnapshot(%q) = %v, want %v (%s)", stream, got, want, rule)
	}
}

func (x *esT) wantKVAll(stream, rule string, want map[string]string) {
	x.Helper()
	all := x.kvAll(stream)
	got := make(map[string]string, len(all))
	for k, e := range all {
		got[k] = e.Value
	}
	if !maps.Equal(got, want) {
		x.Fatalf("KVAll(%q) = %v, want %v (%s)", stream, got, want, rule)
	}
}

func (x *esT) stats(stream string) eventstore.Stats {
	x.Helper()
	st, err := x.s.Stats(x.Context(), stream)
	x.ok(err, fmt.Sprintf("Stats(%q)", stream))
	return st
}

func (x *esT) delete(streams []string, o eventstore.DeleteOptions) eventstore.DeleteResult {
	x.Helper()
	r, err := x.s.Delete(x.Context(), streams, o)
	x.ok(err, fmt.Sprintf("Delete(%q, %+v)", streams, o))
	return r
}

func (x *esT) deleteWhere(f eventstore.StreamFilter) eventstore.DeleteResult {
	x.Helper()
	r, err := x.s.DeleteWhere(x.Context(), f)
	x.ok(err, fmt.Sprintf("DeleteWhere(%+v)", f))
	return r
}

func (x *esT) prune(stream string, o eventstore.PruneOptions) eventstore.PruneResult {
	x.Helper()
	r, err := x.s.Prune(x.Context(), stream, o)
	x.ok(err, fmt.Sprintf("Prune(%q, %+v)", stream, o))
	return r
}

// chain makes a stream with partitions 1..n, one event each (seq = partition),
// partitions before n ContinuedAsNew, and partition n given last. The clock advances
// a second before each partition ends.
func (x *esT) chain(stream string, n int64, last eventstore.Status) {
	x.Helper()
	for p := int64(1); p <= n; p++ {
		x.append(stream, p, p)
		x.clock.Advance(time.Second)
		status := eventstore.StatusContinuedAsNew
		if p == n {
			status = last
		}
		x.end(stream, p, status)
	}
}
