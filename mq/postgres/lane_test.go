package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/duroq/duroq/pgdb"
	"github.com/jmoiron/sqlx"
)

// An Enqueue keeps its connection for the next round, so a stream of enqueues
// goes on while the process's other transactions hold the rest of the pool.
func TestEnqueueKeepsItsConnectionWhileThePoolIsBusy(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	q := openWith(t, dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 4}})
	postgres.SetLaneLinger(q, time.Hour)
	ctx := t.Context()
	if err := q.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	postgres.DrainNotes(q)
	if n := q.DB().Stats().InUse; n != 1 {
		t.Fatalf("after an Enqueue %d connections in use, want 1 (kept for the next round)", n)
	}
	// Other transactions take every connection the pool can give.
	for q.DB().Stats().InUse < 4 {
		tx, err := q.DB().BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
	}
	// Without a connection of its own, this would wait out its context.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := q.Enqueue(wctx, mq.Message{Queue: "q", Payload: []byte("second")}); err != nil {
		t.Fatalf("Enqueue with the rest of the pool busy: %v", err)
	}
}

// The kept connection goes back to the pool once no round came for the linger,
// and at once when the queue closes.
func TestEnqueueGivesItsConnectionBack(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	q := openWith(t, dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 4}})
	postgres.SetLaneLinger(q, 10*time.Millisecond)
	if err := q.Enqueue(t.Context(), mq.Message{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	postgres.DrainNotes(q)
	waitIdle(t, q.DB())

	db, err := pgdb.Open(t.Context(), dsn, pgdb.Options{Schema: schema, MaxOpenConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	shared := postgres.New(db, postgres.Options{})
	postgres.SetLaneLinger(shared, time.Hour)
	if err := shared.Enqueue(t.Context(), mq.Message{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	postgres.DrainNotes(shared)
	if n := db.Stats().InUse; n != 1 {
		t.Fatalf("after an Enqueue %d connections in use, want 1", n)
	}
	shared.Close()
	if n := db.Stats().InUse; n != 0 {
		t.Fatalf("after Close %d connections of the caller's pool in use, want 0", n)
	}
}

// A pool too small to spare a connection keeps none between rounds.
func TestEnqueueKeepsNoConnectionFromASmallPool(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	q := openWith(t, dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 3}})
	postgres.SetLaneLinger(q, time.Hour)
	if err := q.Enqueue(t.Context(), mq.Message{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	postgres.DrainNotes(q)
	if n := q.DB().Stats().InUse; n != 0 {
		t.Fatalf("pool of 3: %d connections in use after an Enqueue, want 0", n)
	}
}

// waitIdle waits (at most a generous margin) until no connection of db is in use.
func waitIdle(t *testing.T, db *sqlx.DB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for db.Stats().InUse != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still in use 10 s after the last Enqueue (linger 10 ms)", db.Stats().InUse)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
