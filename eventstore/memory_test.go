package eventstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/txn"
)

func TestMemoryConformance(t *testing.T) {
	conformance.TestEventStore(t, conformance.EventStoreFactory{
		New: func(t *testing.T, now func() time.Time) eventstore.EventStore {
			return eventstore.NewMemory(eventstore.MemoryOptions{Now: now})
		},
		Corrupt: func(t *testing.T, s eventstore.EventStore, stream string, partition, seq int64) {
			if !eventstore.CorruptMemoryEvent(s.(*eventstore.Memory), stream, partition, seq) {
				t.Fatalf("corrupt: no event %s/%d/%d", stream, partition, seq)
			}
		},
	})
}

func BenchmarkEventStore(b *testing.B) {
	bench.EventStore(b, func(b *testing.B) eventstore.EventStore {
		return eventstore.NewMemory(eventstore.MemoryOptions{})
	})
}

// sideTable stands for another in-memory store of the same database (the queue).
type sideTable struct{ rows []string }

func (s *sideTable) insert(tx *txn.MemoryTx, row string) {
	s.rows = append(s.rows, row)
	n := len(s.rows) - 1
	tx.Undo(func() { s.rows = s.rows[:n] })
}

// TestMemoryTxCommitsWithOtherStores commits a whole turn — events, metadata, custom
// status, KV and a write of another store — in one transaction of a shared database,
// then rolls an identical turn back and finds no trace of it.
func TestMemoryTxCommitsWithOtherStores(t *testing.T) {
	ctx := context.Background()
	db := txn.NewMemoryDatabase()
	m := eventstore.NewMemory(eventstore.MemoryOptions{Database: db})
	side := &sideTable{}
	completed := eventstore.StatusCompleted
	turn := func(tx *txn.MemoryTx, stream string) error {
		if _, _, err := m.ReadLatestTx(ctx, tx, stream); err != nil {
			return err
		}
		if err := m.AppendTx(ctx, tx, stream, 1, []eventstore.Event{{Seq: 1, Data: []byte("started")}}); err != nil {
			return err
		}
		if err := m.UpdateTx(ctx, tx, stream, eventstore.StreamUpdate{Partition: 1, Name: ptr("Orch")}); err != nil {
			return err
		}
		if _, err := m.SetCustomStatusTx(ctx, tx, stream, ptr("busy")); err != nil {
			return err
		}
		if err := m.ApplyKVTx(ctx, tx, stream, 1, []eventstore.KVMutation{{Op: eventstore.KVSet, Key: "k", Value: "v"}}); err != nil {
			return err
		}
		if err := m.UpdateTx(ctx, tx, stream, eventstore.StreamUpdate{Partition: 1, Status: &completed}); err != nil {
			return err
		}
		side.insert(tx, stream)
		return nil
	}

	if err := db.Do(func(tx *txn.MemoryTx) error { return turn(tx, "kept") }); err != nil {
		t.Fatalf("committed turn: %v", err)
	}
	boom := errors.New("the queue write failed")
	err := db.Do(func(tx *txn.MemoryTx) error {
		if err := turn(tx, "rolled-back"); err != nil {
			return err
		}
		// Writes to an existing stream must be undone too.
		if err := m.AppendTx(ctx, tx, "kept", 1, []eventstore.Event{{Seq: 2}}); err != nil {
			return err
		}
		if _, err := m.DeleteTx(ctx, tx, []string{"kept"}, eventstore.DeleteOptions{}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("rolled-back turn: %v, want %v", err, boom)
	}

	if len(side.rows) != 1 || side.rows[0] != "kept" {
		t.Fatalf("side table = %v, want [kept]", side.rows)
	}
	if _, err := m.Stream(ctx, "rolled-back"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("Stream(rolled-back) = %v, want ErrNotFound: a rolled-back transaction leaves no trace", err)
	}
	info, err := m.Stream(ctx, "kept")
	if err != nil {
		t.Fatalf("Stream(kept): %v", err)
	}
	if info.Name != "Orch" || info.Status != completed || info.CustomStatusVersion != 1 {
		t.Fatalf("kept = %+v, want the committed turn", info)
	}
	events, err := m.Read(ctx, "kept", 1)
	if err != nil || len(events) != 1 {
		t.Fatalf("Read(kept) = %d events, %v; want the committed event only", len(events), err)
	}
	snap, err := m.KVSnapshot(ctx, "kept")
	if err != nil || snap["k"].Value != "v" {
		t.Fatalf("KVSnapshot(kept) = %v, %v; want k=v merged by the completion", snap, err)
	}
}

// TestMemoryFailedTxWriteLeavesNothing checks that a twin that fails inside a
// transaction the caller then commits has written nothing of itself.
func TestMemoryFailedTxWriteLeavesNothing(t *testing.T) {
	ctx := context.Background()
	db := txn.NewMemoryDatabase()
	m := eventstore.NewMemory(eventstore.MemoryOptions{Database: db})
	if err := m.Append(ctx, "s", 1, []eventstore.Event{{Seq: 3}}); err != nil {
		t.Fatal(err)
	}
	err := db.Do(func(tx *txn.MemoryTx) error {
		err := m.AppendTx(ctx, tx, "s", 1, []eventstore.Event{{Seq: 1}, {Seq: 2}, {Seq: 3}})
		if !errors.Is(err, eventstore.ErrConflict) {
			t.Errorf("AppendTx = %v, want ErrConflict", err)
		}
		return nil // commit anyway
	})
	if err != nil {
		t.Fatal(err)
	}
	events, err := m.Read(ctx, "s", 1)
	if err != nil || len(events) != 1 {
		t.Fatalf("Read = %d events, %v; want only event 3", len(events), err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestMemoryNilTxIsInvalid(t *testing.T) {
	ctx := context.Background()
	m := eventstore.NewMemory(eventstore.MemoryOptions{})
	if err := m.AppendTx(ctx, nil, "s", 1, []eventstore.Event{{Seq: 1}}); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("AppendTx(nil tx) = %v, want ErrInvalid", err)
	}
	if _, err := m.ReadTx(ctx, nil, "s", 1); !errors.Is(err, eventstore.ErrInvalid) {
		t.Fatalf("ReadTx(nil tx) = %v, want ErrInvalid", err)
	}
}
