package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/jmoiron/sqlx"
)

// openSchema opens a queue on a fresh schema of the test server (skipping the test
// without DUROQ_POSTGRES_DSN) and closes it when the test ends.
func openSchema(t testing.TB) (q *postgres.Queue, dsn, schema string) {
	t.Helper()
	dsn, schema = pgtest.Schema(t)
	return openOn(t, dsn, schema), dsn, schema
}

// openOn opens a queue on an existing schema and closes it when the test ends.
func openOn(t testing.TB, dsn, schema string) *postgres.Queue {
	t.Helper()
	q, err := postgres.Open(context.Background(), dsn, postgres.Options{DB: postgres.DBOptions{Schema: schema, MaxOpenConns: 8}})
	if err != nil {
		t.Fatalf("Open schema %s: %v", schema, err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func TestConformance(t *testing.T) {
	pgtest.DSN(t)
	conformance.TestMessageQueue(t, conformance.QueueFactory{New: func(t *testing.T) mq.MessageQueue {
		q, _, _ := openSchema(t)
		return q
	}})
}

func TestMessagesSurviveReopen(t *testing.T) {
	q, dsn, schema := openSchema(t)
	ctx := t.Context()
	if err := q.Enqueue(ctx, mq.Message{Queue: "q", RoutingKey: "k", Payload: []byte("one")},
		mq.Message{Queue: "q", Payload: []byte("two"), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	b, err := q.DequeueBatch(ctx, "q", mq.DequeueOptions{LockTimeout: 100 * time.Millisecond})
	if err != nil || b == nil {
		t.Fatalf("dequeue: %v %v", b, err)
	}
	q.Close()

	q = openOn(t, dsn, schema)
	st, err := q.Stats(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready+st.Locked != 1 || st.Delayed != 1 {
		t.Fatalf("after reopening: %+v, want the keyed message (ready or still locked) and one delayed", st)
	}
	time.Sleep(120 * time.Millisecond) // let the lock taken before the reopen lapse
	b, err = q.DequeueBatch(ctx, "q", mq.DequeueOptions{})
	if err != nil || b == nil || string(b.Messages[0].Payload) != "one" || b.Messages[0].Attempt != 2 {
		t.Fatalf("redelivery after reopen: %+v, %v; want payload one at attempt 2", b, err)
	}
}

// TestMigrateIsIdempotentAndSafeConcurrently opens one fresh schema from several
// goroutines at once (each with its own pool, as separate processes would), then
// migrates again.
func TestMigrateIsIdempotentAndSafeConcurrently(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	const openers = 6
	var wg sync.WaitGroup
	errs := make(chan error, openers)
	start := make(chan struct{})
	for range openers {
		wg.Go(func() {
			<-start
			q, err := postgres.Open(context.Background(), dsn, postgres.Options{DB: postgres.DBOptions{Schema: schema}})
			if err != nil {
				errs <- err
				return
			}
			errs <- errors.Join(q.Migrate(context.Background()), q.Close())
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent open+migrate: %v", err)
		}
	}
	q := openOn(t, dsn, schema)
	var versions int
	if err := q.DB().Get(&versions, `SELECT count(*) FROM duroq_migrations WHERE line = $1`, postgres.MigrationLine); err != nil {
		t.Fatal(err)
	}
	if versions != 1 {
		t.Fatalf("duroq_migrations holds %d versions of line %q, want 1 (each migration applied once)", versions, postgres.MigrationLine)
	}
}

// TestTxTwinsCommitAndRollBackWithTheCallersWrites shows another package's writes and
// queue writes committing (or rolling back) as one transaction on a shared database.
func TestTxTwinsCommitAndRollBackWithTheCallersWrites(t *testing.T) {
	ctx := t.Context()
	dsn, schema := pgtest.Schema(t)
	db, err := postgres.OpenDB(ctx, dsn, postgres.DBOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := postgres.New(db, postgres.Options{})
	defer q.Close()
	if err := q.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE app_orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	write := func(id string, fail bool) error {
		return runTx(ctx, db, func(tx *sqlx.Tx) error {
			if _, err := tx.Exec(`INSERT INTO app_orders (id) VALUES ($1)`, id); err != nil {
				return err
			}
			if err := q.EnqueueTx(ctx, tx, mq.Message{Queue: "orders", Payload: []byte(id)}); err != nil {
				return err
			}
			if fail {
				return errors.New("the caller gives up")
			}
			return nil
		})
	}
	if err := write("committed", false); err != nil {
		t.Fatal(err)
	}
	if err := write("rolled-back", true); err == nil {
		t.Fatal("expected the failing write to fail")
	}
	var orders []string
	if err := db.Select(&orders, `SELECT id FROM app_orders`); err != nil {
		t.Fatal(err)
	}
	b, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{})
	if err != nil || b == nil {
		t.Fatalf("dequeue: %v %v", b, err)
	}
	next, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{})
	if err != nil || next != nil {
		t.Fatalf("a second message exists (%+v, %v): the rolled-back enqueue leaked", next, err)
	}
	if len(orders) != 1 || orders[0] != "committed" || string(b.Messages[0].Payload) != "committed" {
		t.Fatalf("orders %v, message %q: want exactly the committed pair", orders, b.Messages[0].Payload)
	}

	// Ack inside the caller's transaction, rolled back: the message stays locked by us.
	tx := db.MustBeginTx(ctx, nil)
	if err := q.AckTx(ctx, tx, b.Token, mq.Message{Queue: "orders", Payload: []byte("follow-up")}); err != nil {
		t.Fatal(err)
	}
	tx.Rollback()
	if err := q.Ack(ctx, b.Token); err != nil {
		t.Fatalf("ack after a rolled-back AckTx: %v (the rollback should have left the lock held)", err)
	}
	if st, err := q.Stats(ctx, "orders"); err != nil || st != (mq.Stats{}) {
		t.Fatalf("Stats after the ack = %+v, %v; the rolled-back AckTx must not have enqueued its follow-up", st, err)
	}

	// Every twin in one committed transaction with the caller's write.
	if err := q.Enqueue(ctx, mq.Message{Queue: "jobs", RoutingKey: "k", Key: "job-1", Payload: []byte("1")},
		mq.Message{Queue: "jobs", RoutingKey: "k", Key: "job-2", Payload: []byte("2")},
		mq.Message{Queue: "jobs", Key: "other/1", Payload: []byte("3")}); err != nil {
		t.Fatal(err)
	}
	var held *mq.Batch
	err = runTx(ctx, db, func(tx *sqlx.Tx) error {
		if _, err := tx.Exec(`INSERT INTO app_orders (id) VALUES ('twins')`); err != nil {
			return err
		}
		var err error
		if held, _, err = q.DequeueTx(ctx, tx, "jobs", mq.DequeueOptions{}); err != nil || held == nil {
			return errors.Join(err, errors.New("DequeueTx found nothing"))
		}
		if _, err := q.LockTx(ctx, tx, held.Token); err != nil {
			return err
		}
		if _, err := q.RenewTx(ctx, tx, held.Token, time.Minute); err != nil {
			return err
		}
		if err := q.SetKeyAttrTx(ctx, tx, "jobs", "k", new(int64(7))); err != nil {
			return err
		}
		if n, err := q.RemovePrefixTx(ctx, tx, "jobs", "other/"); err != nil || n != 1 {
			return errors.Join(err, errors.New("RemovePrefixTx removed the wrong count"))
		}
		if n, err := q.RemoveTx(ctx, tx, "jobs", "job-2"); err != nil || n != 1 {
			return errors.Join(err, errors.New("RemoveTx removed the wrong count"))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("transaction with every twin: %v", err)
	}
	// Removing job-2 invalidated the batch: job-1 is eligible again, under attribute 7.
	if err := q.Ack(ctx, held.Token); !errors.Is(err, mq.ErrLockLost) {
		t.Fatalf("Ack of the batch invalidated by RemoveTx = %v, want ErrLockLost", err)
	}
	b, err = q.DequeueBatch(ctx, "jobs", mq.DequeueOptions{KeyAttr: &mq.AttrFilter{Ranges: []mq.AttrRange{{Min: 7, Max: 7}}}})
	if err != nil || b == nil || len(b.Messages) != 1 || string(b.Messages[0].Payload) != "1" {
		t.Fatalf("after the twins: %+v, %v; want job-1 alone, under the attribute set by SetKeyAttrTx", b, err)
	}
	if err := runTx(ctx, db, func(tx *sqlx.Tx) error {
		if err := q.AbandonTx(ctx, tx, b.Token, mq.AbandonOptions{}); err != nil {
			return err
		}
		_, err := q.PurgeKeyTx(ctx, tx, "jobs", "k")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx, "jobs"); err != nil || st != (mq.Stats{}) {
		t.Fatalf("Stats after PurgeKeyTx = %+v, %v; want an empty queue", st, err)
	}
}

func runTx(ctx context.Context, db *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// BenchmarkQueue runs the shared queue benchmarks on a fresh schema of the server
// named by DUROQ_POSTGRES_DSN (synchronous_commit as the server sets it), in the
// steady state: the dequeue statement is planned with table statistics, as
// autovacuum keeps them in production. A benchmark's freshly filled schema has none
// yet, so ANALYZE runs before the first dequeue (inside the timed region).
func BenchmarkQueue(b *testing.B) {
	pgtest.DSN(b)
	bench.MessageQueue(b, func(b *testing.B) mq.MessageQueue {
		q, _, _ := openSchema(b)
		return &analyzed{Queue: q}
	})
}

// BenchmarkQueueCold is BenchmarkQueue on tables PostgreSQL has never analysed, the
// state right after a backlog lands in a new schema and before autovacuum's first
// ANALYZE: the planner may then sort a queue's visible messages on every dequeue.
func BenchmarkQueueCold(b *testing.B) {
	pgtest.DSN(b)
	bench.MessageQueue(b, func(b *testing.B) mq.MessageQueue {
		q, _, _ := openSchema(b)
		return q
	})
}

// analyzed runs ANALYZE on the queue's tables before its first dequeue.
type analyzed struct {
	*postgres.Queue
	once sync.Once
}

func (a *analyzed) DequeueBatch(ctx context.Context, queue string, opts mq.DequeueOptions) (*mq.Batch, error) {
	a.once.Do(func() {
		if _, err := a.DB().ExecContext(ctx, `ANALYZE mq_messages, mq_keys`); err != nil {
			panic(err)
		}
	})
	return a.Queue.DequeueBatch(ctx, queue, opts)
}

// TestNamesPostgreSQLCannotStoreAreInvalid: names are text, so invalid UTF-8 and NUL
// bytes are rejected up front with ErrInvalid, never half-written.
func TestNamesPostgreSQLCannotStoreAreInvalid(t *testing.T) {
	q, _, _ := openSchema(t)
	ctx := t.Context()
	for _, bad := range []string{"nul\x00byte", "bad\xffutf8"} {
		for _, m := range []mq.Message{
			{Queue: bad}, {Queue: "q", RoutingKey: bad}, {Queue: "q", Tag: bad}, {Queue: "q", Session: bad}, {Queue: "q", Key: bad},
		} {
			if err := q.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("fine")}, m); !errors.Is(err, mq.ErrInvalid) {
				t.Errorf("Enqueue of %+v = %v, want ErrInvalid", m, err)
			}
		}
		if _, err := q.DequeueBatch(ctx, bad, mq.DequeueOptions{}); !errors.Is(err, mq.ErrInvalid) {
			t.Errorf("DequeueBatch(%q) = %v, want ErrInvalid", bad, err)
		}
		if _, err := q.Remove(ctx, "q", bad); !errors.Is(err, mq.ErrInvalid) {
			t.Errorf("Remove(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if st, err := q.Stats(ctx, "q"); err != nil || st != (mq.Stats{}) {
		t.Fatalf("Stats = %+v, %v; rejected calls must store nothing", st, err)
	}
	// Names are compared bytewise: a prefix ending in the largest code point still
	// selects exactly its keys.
	if err := q.Enqueue(ctx, mq.Message{Queue: "q", Key: "a\U0010FFFFb"}, mq.Message{Queue: "q", Key: "b"},
		mq.Message{Queue: "q", Key: "é1"}, mq.Message{Queue: "q", Key: "ê"}); err != nil {
		t.Fatal(err)
	}
	if n, err := q.RemovePrefix(ctx, "q", "a\U0010FFFF"); err != nil || n != 1 {
		t.Fatalf("RemovePrefix(a+U+10FFFF) = %d, %v; want 1", n, err)
	}
	if n, err := q.RemovePrefix(ctx, "q", "é"); err != nil || n != 1 {
		t.Fatalf("RemovePrefix(é) = %d, %v; want 1 (not ê)", n, err)
	}
}
