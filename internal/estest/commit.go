package estest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/jmoiron/sqlx"
)

// CommitStore is a SQL event store that commits many streams at once.
type CommitStore interface {
	TxStore
	Totals(ctx context.Context) (eventstore.Totals, error)
	CommitManyTx(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit) error
	ReadStatesTx(ctx context.Context, q sqlx.QueryerContext, streams []string) (map[string]*eventstore.StreamState, error)
}

// RunTx runs fn in a write transaction of db, as the backend's writers do.
type RunTx func(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error

// CommitManyMatchesAppendThenUpdate applies the same rounds of commits to two
// stores, one with CommitManyTx and one with AppendTx then UpdateTx per stream, and
// requires every stream, partition, event and KV entry to come out the same.
func CommitManyMatchesAppendThenUpdate(t *testing.T, open func(t *testing.T, now func() time.Time) CommitStore, run RunTx) {
	ctx := context.Background()
	at := time.UnixMicro(1_700_000_000_000_000)
	now := func() time.Time { return at }
	bulk := open(t, now)
	each := open(t, now)

	str := func(s string) *string { return &s }
	status := func(s eventstore.Status) *eventstore.Status { return &s }
	events := func(from int64, n int) []eventstore.Event {
		var out []eventstore.Event
		for i := range n {
			out = append(out, eventstore.Event{Seq: from + int64(i), Type: "e", Data: []byte{byte(i)}})
		}
		return out
	}
	rounds := [][]eventstore.StreamCommit{
		{ // new streams: with events, without, a child with a parent and a pin
			{Stream: "a", Events: events(1, 2), Update: eventstore.StreamUpdate{Partition: 1, Name: str("flow"), Version: str("1.0.0")}},
			{Stream: "b", Update: eventstore.StreamUpdate{Partition: 1, Name: str("empty")}},
			{Stream: "c", Events: events(1, 1), Update: eventstore.StreamUpdate{Partition: 1, Parent: str("a"), PinnedVersion: str("0.2.0")}},
		},
		{ // more events; one ends with output; one changes version only
			{Stream: "a", Events: events(3, 3), Update: eventstore.StreamUpdate{Partition: 1}},
			{Stream: "b", Events: events(1, 1), Update: eventstore.StreamUpdate{Partition: 1, Status: status(eventstore.StatusCompleted), Output: str("done")}},
			{Stream: "c", Events: events(2, 1), Update: eventstore.StreamUpdate{Partition: 1, Version: str("2.0.0"), Parent: str("")}},
		},
		{ // a new partition (continue-as-new), and a failure
			{Stream: "a", Events: events(1, 1), Update: eventstore.StreamUpdate{Partition: 2, Name: str("flow")}},
			{Stream: "c", Events: events(3, 1), Update: eventstore.StreamUpdate{Partition: 1, Status: status(eventstore.StatusFailed), Output: str("boom")}},
		},
		{ // a new stream that ends in its first commit; a commit without a status to an
			// ended partition (it stays ended); one to a partition older than the current
			{Stream: "d", Events: events(1, 1), Update: eventstore.StreamUpdate{Partition: 1, Name: str("quick"), Status: status(eventstore.StatusCompleted), Output: str("fast")}},
			{Stream: "b", Events: events(2, 1), Update: eventstore.StreamUpdate{Partition: 1}},
			{Stream: "a", Events: events(6, 1), Update: eventstore.StreamUpdate{Partition: 1}},
		},
		{ // a new partition that ends in its first commit; one without a status after
			// an ended partition (it runs)
			{Stream: "b", Events: events(1, 1), Update: eventstore.StreamUpdate{Partition: 2, Status: status(eventstore.StatusCompleted)}},
			{Stream: "c", Events: events(1, 1), Update: eventstore.StreamUpdate{Partition: 2}},
		},
		{ // a commit to an older partition leaves the ended current one as it is
			{Stream: "b", Events: events(3, 1), Update: eventstore.StreamUpdate{Partition: 1}},
		},
	}
	// KV written before the round that ends a's second partition must be merged by it.
	kv := []eventstore.KVMutation{{Op: eventstore.KVSet, Key: "k", Value: "v", At: at}}
	final := []eventstore.StreamCommit{{Stream: "a", Events: events(2, 1), Update: eventstore.StreamUpdate{Partition: 2, Status: status(eventstore.StatusCompleted)}}}

	write := func(s CommitStore, commits []eventstore.StreamCommit, many bool) {
		t.Helper()
		err := run(ctx, s.DB(), func(tx *sqlx.Tx) error {
			if many {
				return s.CommitManyTx(ctx, tx, commits)
			}
			for _, c := range commits {
				if err := s.AppendTx(ctx, tx, c.Stream, c.Update.Partition, c.Events); err != nil {
					return err
				}
				if err := s.UpdateTx(ctx, tx, c.Stream, c.Update); err != nil {
					return err
				}
			}
			return nil
		})
		must(t, err, "commit")
	}
	for _, r := range rounds {
		write(bulk, r, true)
		write(each, r, false)
		var streams []string
		for _, c := range r {
			streams = append(streams, c.Stream)
		}
		same(t, bulk, each, streams...)
		at = at.Add(time.Second)
	}
	for _, s := range []CommitStore{bulk, each} {
		must(t, s.ApplyKV(ctx, "a", 2, kv), "ApplyKV")
	}
	write(bulk, final, true)
	write(each, final, false)

	same(t, bulk, each, "a", "b", "c", "d")
	if snap, err := bulk.KVSnapshot(ctx, "a"); err != nil || snap["k"].Value != "v" {
		t.Errorf("KV written before the ending commit was not merged: %v, %v", snap, err)
	}

	// ReadStatesTx says what Stream, Read of the current partition and KVSnapshot say.
	states, err := bulk.ReadStatesTx(ctx, bulk.DB(), []string{"a", "b", "c", "d", "missing"})
	must(t, err, "ReadStatesTx")
	if _, ok := states["missing"]; ok || len(states) != 4 {
		t.Errorf("ReadStatesTx returned %d states (missing included: %v), want a, b, c and d", len(states), ok)
	}
	for _, stream := range []string{"a", "b", "c", "d"} {
		info, err := bulk.Stream(ctx, stream)
		must(t, err, "Stream")
		events, err := bulk.Read(ctx, stream, info.CurrentPartition)
		must(t, err, "Read")
		kv, err := bulk.KVSnapshot(ctx, stream)
		must(t, err, "KVSnapshot")
		want := &eventstore.StreamState{Info: info, Events: events, KV: kv}
		if got := states[stream]; !reflect.DeepEqual(got, want) {
			t.Errorf("ReadStatesTx(%q) = %+v, want %+v", stream, got, want)
		}
	}
}

// CommitManyIsAllOrNothing: a conflicting event in one stream leaves nothing of the
// call written, and the error names the stream and sequence number.
func CommitManyIsAllOrNothing(t *testing.T, s CommitStore, run RunTx) {
	ctx := context.Background()
	must(t, s.Append(ctx, "x", 1, []eventstore.Event{{Seq: 1, Type: "e"}}), "Append")
	err := run(ctx, s.DB(), func(tx *sqlx.Tx) error {
		err := s.CommitManyTx(ctx, tx, []eventstore.StreamCommit{
			{Stream: "fresh", Events: []eventstore.Event{{Seq: 1, Type: "e"}}, Update: eventstore.StreamUpdate{Partition: 1}},
			{Stream: "x", Events: []eventstore.Event{{Seq: 1, Type: "dup"}}, Update: eventstore.StreamUpdate{Partition: 1}},
		})
		var conflict *eventstore.ConflictError
		if !errors.As(err, &conflict) || conflict.Stream != "x" || conflict.Seq != 1 {
			t.Errorf("CommitManyTx with a duplicate event: %v, want a ConflictError for x seq 1", err)
		}
		return nil // commit what the transaction holds: the savepoint must have undone it all
	})
	must(t, err, "transaction")
	if _, err := s.Stream(ctx, "fresh"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Errorf("stream of a failed CommitManyTx exists: %v", err)
	}
	err = run(ctx, s.DB(), func(tx *sqlx.Tx) error {
		return s.CommitManyTx(ctx, tx, []eventstore.StreamCommit{
			{Stream: "y", Update: eventstore.StreamUpdate{Partition: 1}}, {Stream: "y", Update: eventstore.StreamUpdate{Partition: 1}}})
	})
	if !errors.Is(err, eventstore.ErrInvalid) {
		t.Errorf("CommitManyTx naming a stream twice: %v, want ErrInvalid", err)
	}
}

// same requires bulk and each to say the same of streams (every stream, partition,
// event and KV entry) and to count the same streams per status.
func same(t *testing.T, bulk, each CommitStore, streams ...string) {
	t.Helper()
	ctx := context.Background()
	for _, stream := range streams {
		for _, read := range []struct {
			what string
			get  func(s CommitStore) (any, error)
		}{
			{"Stream", func(s CommitStore) (any, error) { return s.Stream(ctx, stream) }},
			{"Partitions", func(s CommitStore) (any, error) { return s.Partitions(ctx, stream) }},
			{"ReadLatest", func(s CommitStore) (any, error) { p, e, err := s.ReadLatest(ctx, stream); return []any{p, e}, err }},
			{"Read(1)", func(s CommitStore) (any, error) { return s.Read(ctx, stream, 1) }},
			{"KVSnapshot", func(s CommitStore) (any, error) { return s.KVSnapshot(ctx, stream) }},
		} {
			got, err1 := read.get(bulk)
			want, err2 := read.get(each)
			if !reflect.DeepEqual(got, want) || !errors.Is(err1, err2) {
				t.Errorf("%s(%q): CommitManyTx gave %+v (%v), AppendTx+UpdateTx gave %+v (%v)", read.what, stream, got, err1, want, err2)
			}
		}
	}
	got, err1 := bulk.Totals(ctx)
	want, err2 := each.Totals(ctx)
	if !reflect.DeepEqual(got, want) || err1 != nil || err2 != nil {
		t.Errorf("Totals: CommitManyTx gave %+v (%v), AppendTx+UpdateTx gave %+v (%v)", got, err1, want, err2)
	}
}
