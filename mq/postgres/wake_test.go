package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/duroq/duroq/pgdb"
)

// crossWake bounds how soon a change made through another backend instance must wake
// a long poll (a notification takes a round trip through the server; far less in
// practice).
const crossWake = 2 * time.Second

type polled struct {
	b    *mq.Batch
	err  error
	took time.Duration
}

// poll starts a long poll of queue on q and returns its outcome later.
func poll(t *testing.T, q *postgres.Queue, queue string, wait time.Duration) <-chan polled {
	t.Helper()
	ch := make(chan polled, 1)
	go func() {
		start := time.Now()
		b, err := q.DequeueBatch(t.Context(), queue, mq.DequeueOptions{Wait: wait, LockTimeout: time.Minute})
		ch <- polled{b, err, time.Since(start)}
	}()
	time.Sleep(200 * time.Millisecond) // let the poll find nothing and start waiting
	return ch
}

// wantWoken fails unless the poll returned a batch with payload want within crossWake.
func wantWoken(t *testing.T, ch <-chan polled, want, what string) *mq.Batch {
	t.Helper()
	select {
	case p := <-ch:
		if p.err != nil || p.b == nil {
			t.Fatalf("%s: the long poll returned %+v, %v", what, p.b, p.err)
		}
		if got := string(p.b.Messages[0].Payload); got != want {
			t.Fatalf("%s: the long poll got %q, want %q", what, got, want)
		}
		return p.b
	case <-time.After(crossWake):
		t.Fatalf("%s: the long poll was not woken within %v", what, crossWake)
		return nil
	}
}

// TestWaitWakesAcrossInstances: two queues on one schema, each with its own pool and
// LISTEN connection, stand for two processes. Enqueue, Ack and Abandon in one wake a
// long poll in the other at once, although the poll has no earlier reason to look
// again (no message is due before its 30 s deadline).
func TestWaitWakesAcrossInstances(t *testing.T) {
	waiter, dsn, schema := openSchema(t)
	writer := openOn(t, dsn, schema)
	ctx := t.Context()

	ch := poll(t, waiter, "q", 30*time.Second)
	if err := writer.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("enqueued")}); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, ch, "enqueued", "Enqueue in another instance")

	// A key held by the writer: its newer message waits for the Ack.
	if err := writer.Enqueue(ctx, mq.Message{Queue: "k", RoutingKey: "A", Payload: []byte("a1")}); err != nil {
		t.Fatal(err)
	}
	held, err := writer.DequeueBatch(ctx, "k", mq.DequeueOptions{LockTimeout: time.Minute})
	if err != nil || held == nil {
		t.Fatalf("dequeue: %v %v", held, err)
	}
	if err := writer.Enqueue(ctx, mq.Message{Queue: "k", RoutingKey: "A", Payload: []byte("a2")}); err != nil {
		t.Fatal(err)
	}
	ch = poll(t, waiter, "k", 30*time.Second)
	if err := writer.Ack(ctx, held.Token); err != nil {
		t.Fatal(err)
	}
	b := wantWoken(t, ch, "a2", "Ack releasing a key in another instance")

	ch = poll(t, writer, "k", 30*time.Second)
	if err := waiter.Abandon(ctx, b.Token, mq.AbandonOptions{}); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, ch, "a2", "Abandon in another instance")
}

// TestPauseHoldsAcrossInstances: a pause made through one instance stops the
// consumers of another, and Resume through one wakes a long poll waiting in the
// other through NOTIFY (no message is due before the poll's 30 s deadline).
func TestPauseHoldsAcrossInstances(t *testing.T) {
	waiter, dsn, schema := openSchema(t)
	admin := openOn(t, dsn, schema)
	ctx := t.Context()
	if err := admin.Pause(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if err := waiter.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("held back")}); err != nil {
		t.Fatal(err)
	}
	if b, err := waiter.DequeueBatch(ctx, "q", mq.DequeueOptions{}); b != nil || err != nil {
		t.Fatalf("a queue another instance paused delivered %+v, %v", b, err)
	}
	if st, err := waiter.Stats(ctx, "q"); err != nil || !st.Paused {
		t.Fatalf("Stats in the other instance = %+v, %v; want Paused", st, err)
	}
	ch := poll(t, waiter, "q", 30*time.Second)
	if err := admin.Resume(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, ch, "held back", "Resume in another instance")
}

// TestWaitRetakesAClaimThatRolledBack: a long poll whose scan skipped a message
// another transaction had locked (a consumer claiming it) looks again soon instead
// of sleeping to its deadline, for when that claim rolls back (its consumer
// stopped mid-fetch) nothing notifies the waiters that the message is ready again.
// Two processes' runtimes once waited 30 s so (TestTracingAcrossProcesses).
func TestWaitRetakesAClaimThatRolledBack(t *testing.T) {
	waiter, dsn, schema := openSchema(t)
	claimer := openOn(t, dsn, schema)
	ctx := t.Context()
	if err := claimer.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("claimed, then released")}); err != nil {
		t.Fatal(err)
	}
	tx := claimer.DB().MustBeginTx(ctx, nil)
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE mq_messages SET attempts = attempts + 1 WHERE queue = 'q'`); err != nil {
		t.Fatal(err)
	}
	ch := poll(t, waiter, "q", 30*time.Second) // its scans skip the locked row meanwhile
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, ch, "claimed, then released", "a claim rolled back in another instance")
}

// TestWaitWakesOnCommitOfTxTwins: a *Tx write wakes the other instances when Notify
// follows its commit; a rolled-back one never wakes them (nothing is sent inside the
// transaction).
func TestWaitWakesOnCommitOfTxTwins(t *testing.T) {
	waiter, dsn, schema := openSchema(t)
	writer := openOn(t, dsn, schema)
	ctx := t.Context()
	db := writer.DB()

	ch := poll(t, waiter, "q", 30*time.Second)
	tx := db.MustBeginTx(ctx, nil)
	if err := writer.EnqueueTx(ctx, tx, mq.Message{Queue: "q", Payload: []byte("rolled back")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // nothing may arrive before the commit
	tx.Rollback()
	select {
	case p := <-ch:
		t.Fatalf("a long poll returned %+v, %v for an enqueue that was rolled back", p.b, p.err)
	case <-time.After(500 * time.Millisecond):
	}
	err := sqltx.Run(ctx, db, func(tx *sqlx.Tx) error {
		return writer.EnqueueTx(ctx, tx, mq.Message{Queue: "q", Payload: []byte("committed")})
	})
	if err != nil {
		t.Fatal(err)
	}
	writer.Notify("q")
	wantWoken(t, ch, "committed", "EnqueueTx committed in another instance")
}

// TestWaitWakesAfterTheListenerReconnects kills the server backend of the LISTEN
// connection: long polls keep ending at their deadlines meanwhile, and once the
// listener is back, another instance's Enqueue wakes them again.
func TestWaitWakesAfterTheListenerReconnects(t *testing.T) {
	waiter, dsn, schema := openSchema(t)
	writer := openOn(t, dsn, schema)
	ctx := t.Context()
	channel, err := postgres.Channel(ctx, waiter)
	if err != nil {
		t.Fatal(err)
	}
	listener := func() int {
		var pid int
		err := writer.DB().GetContext(ctx, &pid, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE query = $1`,
			`LISTEN "`+channel+`"`)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	waitListener := func(not int) int {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if pid := listener(); pid != 0 && pid != not {
				return pid
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no LISTEN connection on %s (other than backend %d) within 10s", channel, not)
		return 0
	}

	if b, err := waiter.DequeueBatch(ctx, "q", mq.DequeueOptions{Wait: 10 * time.Millisecond}); err != nil || b != nil {
		t.Fatalf("first long poll: %v, %v", b, err) // starts the listener
	}
	old := waitListener(0)
	var killed bool
	if err := writer.DB().GetContext(ctx, &killed, `SELECT pg_terminate_backend($1)`, old); err != nil || !killed {
		t.Fatalf("terminate the listener's backend %d: %v, %v", old, killed, err)
	}
	start := time.Now()
	b, err := waiter.DequeueBatch(ctx, "q", mq.DequeueOptions{Wait: 300 * time.Millisecond})
	if err != nil || b != nil || time.Since(start) > 300*time.Millisecond+crossWake {
		t.Fatalf("a long poll while the listener is down returned %v, %v after %v; want nothing at its deadline", b, err, time.Since(start))
	}
	waitListener(old)

	ch := poll(t, waiter, "q", 30*time.Second)
	if err := writer.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("after reconnect")}); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, ch, "after reconnect", "Enqueue after the listener reconnected")
}

// TestCloseEndsTheListener: Close drops the LISTEN connection instead of returning it
// to a shared pool, and later long polls fail with ErrClosed.
func TestCloseEndsTheListener(t *testing.T) {
	q, dsn, schema := openSchema(t)
	ctx := t.Context()
	db, err := pgdb.Open(ctx, dsn, pgdb.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	shared := postgres.New(db, postgres.Options{})
	if _, err := shared.DequeueBatch(ctx, "q", mq.DequeueOptions{Wait: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	channel, err := postgres.Channel(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		if err := q.DB().GetContext(ctx, &n, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, `LISTEN "`+channel+`"`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for count() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if count() != 1 {
		t.Fatalf("%d LISTEN connections, want 1", count())
	}
	if err := shared.Close(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for count() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d LISTEN connections remain after Close", n)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("the shared database must stay open after the queue's Close: %v", err)
	}
	if _, err := shared.DequeueBatch(ctx, "q", mq.DequeueOptions{Wait: time.Second}); !errors.Is(err, mq.ErrClosed) {
		t.Fatalf("DequeueBatch after Close = %v, want ErrClosed", err)
	}
}

// TestPoolOfOneStillWorks: the listener must not take a one-connection pool's only
// connection; long polls then end at their deadline or with this process's writes.
func TestPoolOfOneStillWorks(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	q, err := postgres.Open(t.Context(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := t.Context()
	if b, err := q.DequeueBatch(ctx, "q", mq.DequeueOptions{Wait: 100 * time.Millisecond}); err != nil || b != nil {
		t.Fatalf("long poll on an empty queue: %v, %v", b, err)
	}
	ch := poll(t, q, "q", 30*time.Second)
	if err := q.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("local")}); err != nil {
		t.Fatalf("Enqueue with a pool of one while a long poll waits: %v", err)
	}
	wantWoken(t, ch, "local", "Enqueue in the same process with a pool of one")
}

// TestCloseSendsPendingWakeUps: a writer that closes right after its last Enqueue
// still wakes the other instances' long polls (Close sends the NOTIFY that follows
// a commit before it closes the database).
func TestCloseSendsPendingWakeUps(t *testing.T) {
	waiter, dsn, schema := openSchema(t)
	writer := openOn(t, dsn, schema)
	ch := poll(t, waiter, "q", 30*time.Second)
	for i := range 20 { // several commits, so that some wake-ups are pending at Close
		if err := writer.Enqueue(t.Context(), mq.Message{Queue: "other", Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := writer.Enqueue(t.Context(), mq.Message{Queue: "q", Payload: []byte("last")}); err != nil {
		t.Fatal(err)
	}
	if err := writer.Close(); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, ch, "last", "Enqueue right before Close in another instance")
}

// TestBurstOfWakeUpsSharesNotifyStatements: the wake-ups of a burst of Enqueues go
// out in at most one NOTIFY statement per postgres.NotifyEvery, each naming a queue
// once (a listener receives one notification per queue and statement), instead of
// one statement per commit.
func TestBurstOfWakeUpsSharesNotifyStatements(t *testing.T) {
	ctx := t.Context()
	q, dsn, schema := openSchema(t)
	channel, err := postgres.Channel(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	writer := openOn(t, dsn, schema)
	const writers, each = 4, 100
	began := time.Now()
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				if err := writer.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("m")}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := writer.Close(); err != nil { // sends the last wake-ups
		t.Fatal(err)
	}
	took := time.Since(began)
	received := 0
	for {
		wait, cancel := context.WithTimeout(ctx, time.Second)
		_, err := listener.WaitForNotification(wait)
		cancel()
		if err != nil {
			break
		}
		received++
	}
	most := int(took/postgres.NotifyEvery) + 1
	t.Logf("%d Enqueues of %d writers in %v: %d notifications (at most %d)", writers*each, writers, took, received, most)
	if received == 0 || received > most {
		t.Errorf("%d notifications for %d Enqueues of one queue in %v, want 1 to %d (one statement per %v)",
			received, writers*each, took, most, postgres.NotifyEvery)
	}
}
