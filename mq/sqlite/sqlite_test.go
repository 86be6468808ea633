package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/internal/mqtest"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
	"github.com/duroq/duroq/sqlitedb"
)

func openQueue(t testing.TB, path string) *sqlite.Queue {
	t.Helper()
	q, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatalf("Open %s: %v", path, err)
	}
	return q
}

// clockedQueue is a conformance factory: a queue on the database path gives, whose
// clock is the suite's.
func clockedQueue(path func(t *testing.T) string) func(t *testing.T, now func() time.Time) mq.MessageQueue {
	return func(t *testing.T, now func() time.Time) mq.MessageQueue {
		q, err := sqlite.Open(path(t), sqlite.Options{Now: now})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return q
	}
}

func TestConformance(t *testing.T) {
	conformance.TestMessageQueue(t, conformance.QueueFactory{New: clockedQueue(func(t *testing.T) string {
		return filepath.Join(t.TempDir(), "queue.db")
	})})
}

func TestConformanceInMemoryDatabase(t *testing.T) {
	conformance.TestMessageQueue(t, conformance.QueueFactory{New: clockedQueue(func(*testing.T) string { return ":memory:" })})
}

func TestMessagesSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openQueue(t, path)
	if err := q.Enqueue(t.Context(), mq.Message{Queue: "q", RoutingKey: "k", Payload: []byte("one")},
		mq.Message{Queue: "q", Payload: []byte("two"), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	b, err := q.DequeueBatch(t.Context(), "q", mq.DequeueOptions{LockTimeout: 50 * time.Millisecond})
	if err != nil || b == nil {
		t.Fatalf("dequeue: %v %v", b, err)
	}
	q.Close()

	q = openQueue(t, path)
	defer q.Close()
	st, err := q.Stats(t.Context(), "q")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready+st.Locked != 1 || st.Delayed != 1 {
		t.Fatalf("after reopening: %+v, want the keyed message (ready or still locked) and one delayed", st)
	}
	time.Sleep(60 * time.Millisecond) // let the lock taken before the reopen lapse
	b, err = q.DequeueBatch(t.Context(), "q", mq.DequeueOptions{})
	if err != nil || b == nil || string(b.Messages[0].Payload) != "one" || b.Messages[0].Attempt != 2 {
		t.Fatalf("redelivery after reopen: %+v, %v; want payload one at attempt 2", b, err)
	}
}

func TestMigrateIsIdempotentAndSafeConcurrently(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			q, err := sqlite.Open(path, sqlite.Options{})
			if err != nil {
				errs <- err
				return
			}
			errs <- errors.Join(q.Migrate(context.Background()), q.Close())
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent open+migrate: %v", err)
		}
	}
}

// TestTxTwinsCommitAndRollBackWithTheCallersWrites: see mqtest.TxTwins.
func TestTxTwinsCommitAndRollBackWithTheCallersWrites(t *testing.T) {
	db, err := sqlitedb.Open(filepath.Join(t.TempDir(), "shared.db"), sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := sqlite.New(db, sqlite.Options{})
	if err := q.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	mqtest.TxTwins(t, db, q)
}

// TestWaitWakesOnTxEnqueueAfterNotify checks the documented Notify hand-off.
func TestWaitWakesOnTxEnqueueAfterNotify(t *testing.T) {
	ctx := t.Context()
	q := openQueue(t, filepath.Join(t.TempDir(), "queue.db"))
	defer q.Close()
	got := make(chan *mq.Batch, 1)
	go func() {
		b, _ := q.DequeueBatch(ctx, "q", mq.DequeueOptions{Wait: 10 * time.Second})
		got <- b
	}()
	time.Sleep(50 * time.Millisecond) // let the poll start waiting
	start := time.Now()
	if err := sqltx.Run(ctx, q.DB(), func(tx *sqlx.Tx) error { return q.EnqueueTx(ctx, tx, mq.Message{Queue: "q"}) }); err != nil {
		t.Fatal(err)
	}
	q.Notify("q")
	select {
	case b := <-got:
		if b == nil {
			t.Fatal("the long poll returned nothing")
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("woke after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Notify did not wake the long poll")
	}
}

// TestPauseHoldsAcrossProcesses: two queues on one file, each with its own pool,
// writer and watcher, stand for two processes. A pause made through one stops the
// other's consumers and survives a restart; Resume through one wakes a long poll
// waiting in the other (SQLite signals nothing: the other's watcher sees the
// commit).
func TestPauseHoldsAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	admin, worker := openQueue(t, path), openQueue(t, path)
	defer worker.Close()
	ctx := t.Context()
	if err := admin.Pause(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if err := worker.Enqueue(ctx, mq.Message{Queue: "q", Payload: []byte("m1")}); err != nil {
		t.Fatal(err)
	}
	if b, err := worker.DequeueBatch(ctx, "q", mq.DequeueOptions{}); b != nil || err != nil {
		t.Fatalf("a queue another process paused delivered %+v, %v", b, err)
	}
	admin.Close()
	admin = openQueue(t, path)
	defer admin.Close()
	if st, err := admin.Stats(ctx, "q"); err != nil || !st.Paused || st.Ready != 1 {
		t.Fatalf("after reopening: %+v, %v; want the queue still paused with its message", st, err)
	}

	type polled struct {
		b   *mq.Batch
		err error
	}
	got := make(chan polled, 1)
	go func() {
		b, err := worker.DequeueBatch(ctx, "q", mq.DequeueOptions{Wait: 30 * time.Second})
		got <- polled{b, err}
	}()
	time.Sleep(200 * time.Millisecond) // let the poll find nothing and wait
	resumed := time.Now()
	if err := admin.Resume(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p.err != nil || p.b == nil || string(p.b.Messages[0].Payload) != "m1" {
			t.Fatalf("the long poll returned %+v, %v after Resume in another process", p.b, p.err)
		}
		t.Logf("Resume in another process woke the long poll after %v", time.Since(resumed))
	case <-time.After(2 * time.Second):
		t.Fatal("Resume in another process did not wake the long poll within 2s")
	}
}

// BenchmarkQueue runs the shared queue benchmarks on a SQLite file (WAL,
// synchronous=NORMAL).
func BenchmarkQueue(b *testing.B) {
	bench.MessageQueue(b, func(b *testing.B) mq.MessageQueue {
		q, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return q
	})
}

// TestNotADatabaseIsErrCorrupt: opening a file that is not a SQLite database fails
// with the permanent ErrCorrupt.
func TestNotADatabaseIsErrCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "garbage.db")
	if err := os.WriteFile(path, bytes.Repeat([]byte("not a database "), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	q, err := sqlite.Open(path, sqlite.Options{})
	if err == nil {
		q.Close()
		t.Fatal("Open of a garbage file succeeded")
	}
	if !errors.Is(err, mq.ErrCorrupt) {
		t.Fatalf("Open of a garbage file: %v, want an error matching mq.ErrCorrupt", err)
	}
}

// TestCorruptPageIsErrCorrupt: a damaged page of the messages table makes the
// operations that read it fail with ErrCorrupt (permanent), naming the operation.
func TestCorruptPageIsErrCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openQueue(t, path)
	ctx := t.Context()
	var msgs []mq.Message
	for range 200 {
		msgs = append(msgs, mq.Message{Queue: "q", Payload: bytes.Repeat([]byte("x"), 100)})
	}
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	var pageSize, root int64
	if err := q.DB().Get(&pageSize, `PRAGMA page_size`); err != nil {
		t.Fatal(err)
	}
	if err := q.DB().Get(&root, `SELECT rootpage FROM sqlite_schema WHERE name = 'mq_messages'`); err != nil {
		t.Fatal(err)
	}
	if _, err := q.DB().Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil { // every page in the file
		t.Fatal(err)
	}
	q.Close()

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, int(pageSize)), (root-1)*pageSize); err != nil {
		t.Fatal(err)
	}
	f.Close()

	q = openQueue(t, path)
	defer q.Close()
	for _, c := range []struct {
		op string
		fn func() error
	}{
		{"dequeue", func() error { _, err := q.DequeueBatch(ctx, "q", mq.DequeueOptions{}); return err }},
		{"peek", func() error { _, err := q.Peek(ctx, "q", mq.PeekOptions{}); return err }},
		{"enqueue", func() error { return q.Enqueue(ctx, mq.Message{Queue: "q"}) }},
	} {
		err := c.fn()
		if !errors.Is(err, mq.ErrCorrupt) {
			t.Errorf("%s on a corrupt page: %v, want an error matching mq.ErrCorrupt", c.op, err)
			continue
		}
		if !strings.Contains(err.Error(), c.op) {
			t.Errorf("%s: the error %q does not name the operation", c.op, err)
		}
	}
}

// TestExpiredDedupIDsAreSwept: ids past their window are deleted by a later write
// that remembers ids (at most once a second), so the table holds about a window's
// worth of ids, not every id ever seen.
func TestExpiredDedupIDsAreSwept(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	q, err := sqlite.Open(filepath.Join(t.TempDir(), "queue.db"), sqlite.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	count := func() (n int) {
		t.Helper()
		if err := q.DB().Get(&n, `SELECT count(*) FROM mq_dedup`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 10 {
		if err := q.Enqueue(t.Context(), mq.Message{Queue: "q", DedupID: fmt.Sprint("old-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 10 {
		t.Fatalf("%d remembered ids, want 10", n)
	}
	now = now.Add(mq.DefaultDedupWindow + time.Second)
	if err := q.Enqueue(t.Context(), mq.Message{Queue: "q", DedupID: "new"}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d remembered ids after the window, want 1 (the expired ones swept)", n)
	}
}

func TestLockTokensAreTimeOrderedAndDistinct(t *testing.T) {
	q := openQueue(t, filepath.Join(t.TempDir(), "q.db"))
	defer q.Close()
	mqtest.LockTokensAreTimeOrderedAndDistinct(t, q)
}
