package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/internal/mqtest"
	"github.com/duroq/duroq/internal/pgsql"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/duroq/duroq/pgdb"
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
	return openWith(t, dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 8}})
}

// openWith opens a queue with options o and closes it when the test ends.
func openWith(t testing.TB, dsn string, o postgres.Options) *postgres.Queue {
	t.Helper()
	q, err := postgres.Open(context.Background(), dsn, o)
	if err != nil {
		t.Fatalf("Open schema %s: %v", o.DB.Schema, err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func TestConformance(t *testing.T) {
	pgtest.DSN(t)
	conformance.TestMessageQueue(t, conformance.QueueFactory{New: func(t *testing.T, now func() time.Time) mq.MessageQueue {
		dsn, schema := pgtest.Schema(t)
		q, err := postgres.Open(context.Background(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 8}, Now: now})
		if err != nil {
			t.Fatalf("Open schema %s: %v", schema, err)
		}
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
			q, err := postgres.Open(context.Background(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema}})
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
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("migration files: %v, %v", files, err)
	}
	if versions != len(files) {
		t.Fatalf("duroq_migrations holds %d versions of line %q, want %d (each migration applied once)", versions, postgres.MigrationLine, len(files))
	}
}

// TestTxTwinsCommitAndRollBackWithTheCallersWrites: see mqtest.TxTwins.
func TestTxTwinsCommitAndRollBackWithTheCallersWrites(t *testing.T) {
	ctx := t.Context()
	dsn, schema := pgtest.Schema(t)
	db, err := pgdb.Open(ctx, dsn, pgdb.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := postgres.New(db, postgres.Options{})
	defer q.Close()
	if err := q.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	mqtest.TxTwins(t, db, q)
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

// TestDequeueAnalysesAnUnanalysedBacklog loads a backlog into a new schema, where
// mq_messages has no planner statistics, and checks that dequeuing gives it some:
// without them every dequeue sorts the queue's whole backlog (see stats.go).
func TestDequeueAnalysesAnUnanalysedBacklog(t *testing.T) {
	q, _, schema := openSchema(t)
	ctx := t.Context()
	hasStats := func() bool {
		var ok bool
		if err := q.DB().GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = $1 AND tablename = 'mq_messages')`, schema); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	msgs := make([]mq.Message, 3000)
	for i := range msgs {
		msgs[i] = mq.Message{Queue: "q", Payload: make([]byte, 128)}
	}
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if hasStats() {
		t.Fatal("a new schema's mq_messages has statistics before any dequeue; the test proves nothing")
	}
	if _, err := q.DequeueBatches(ctx, "q", mq.DequeueOptions{}, 10); err != nil {
		t.Fatal(err)
	}
	// The analysis runs in the background: allow it seconds.
	for deadline := time.Now().Add(10 * time.Second); !hasStats(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("mq_messages has no statistics 10 s after a dequeue of a 3,000-message backlog")
		}
	}
}

// TestSetKeyAttrsTx sets several keys' attributes in one statement: a key given
// twice gets its last attribute, and a cleared attribute of an unlocked key leaves
// no row behind.
func TestSetKeyAttrsTx(t *testing.T) {
	q, _, _ := openSchema(t)
	ctx := t.Context()
	one, two := int64(1), int64(2)
	set := func(keys []string, attrs []*int64) {
		t.Helper()
		tx, err := q.DB().BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := q.SetKeyAttrsTx(ctx, tx, "q", keys, attrs); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	set([]string{"a", "c"}, []*int64{&one, &one})
	set([]string{"a", "b", "a", "c"}, []*int64{&two, &two, nil, &two})
	var rows []struct {
		Key  string `db:"routing_key"`
		Attr *int64 `db:"attr"`
	}
	if err := q.DB().SelectContext(ctx, &rows, `SELECT routing_key, attr FROM mq_keys WHERE queue = 'q' ORDER BY routing_key`); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Key != "b" || rows[1].Key != "c" || *rows[0].Attr != 2 || *rows[1].Attr != 2 {
		t.Fatalf("mq_keys holds %+v, want b=2 and c=2 (a cleared and gone)", rows)
	}
	tx, err := q.DB().BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := q.SetKeyAttrsTx(ctx, tx, "q", []string{"a"}, nil); !errors.Is(err, mq.ErrInvalid) {
		t.Fatalf("SetKeyAttrsTx with 1 key and 0 attributes: %v, want ErrInvalid", err)
	}
}

// TestUnchangedKeyAttributeIsNotWritten sets a held key's attribute to what it
// already is, cleared and then set, and checks through the row's ctid, which any
// new row version changes, that only the changes wrote the row: the runtime clears
// the pin of every execution it starts, and a write per start cost 28 µs of server
// time per orchestration.
func TestUnchangedKeyAttributeIsNotWritten(t *testing.T) {
	q, _, _ := openSchema(t)
	ctx := t.Context()
	if err := q.Enqueue(ctx, mq.Message{Queue: "q", RoutingKey: "k", Payload: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	if b, err := q.DequeueBatch(ctx, "q", mq.DequeueOptions{LockTimeout: time.Minute}); err != nil || b == nil {
		t.Fatalf("DequeueBatch: %v, %v; want the key's batch", b, err)
	}
	ctid := func() string {
		t.Helper()
		var c string
		if err := q.DB().GetContext(ctx, &c, `SELECT ctid::text FROM mq_keys WHERE queue = 'q' AND routing_key = 'k'`); err != nil {
			t.Fatal(err)
		}
		return c
	}
	five := int64(5)
	for _, step := range []struct {
		what  string
		attr  *int64
		write bool
	}{
		{"clearing the unset attribute of the held key", nil, false},
		{"setting it", &five, true},
		{"setting it to the same value", &five, false},
		{"clearing it", nil, true},
	} {
		before := ctid()
		if err := q.SetKeyAttr(ctx, "q", "k", step.attr); err != nil {
			t.Fatal(err)
		}
		if wrote := ctid() != before; wrote != step.write {
			t.Errorf("%s: wrote the key's row %v, want %v", step.what, wrote, step.write)
		}
	}
}

// TestClosedDatabaseIsErrClosed: operations on a queue whose shared database the
// caller closed fail with mq.ErrClosed, which consumers treat as permanent, not as a
// transient failure to retry forever.
func TestClosedDatabaseIsErrClosed(t *testing.T) {
	_, dsn, schema := openSchema(t)
	db, err := pgdb.Open(t.Context(), dsn, pgdb.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	q := postgres.New(db, postgres.Options{})
	defer q.Close()
	db.Close()
	if err := q.Enqueue(t.Context(), mq.Message{Queue: "q", Payload: []byte("x")}); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("Enqueue on a closed database: %v, want ErrClosed", err)
	}
	if _, err := q.DequeueBatch(t.Context(), "q", mq.DequeueOptions{}); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("DequeueBatch on a closed database: %v, want ErrClosed", err)
	}
	if err := q.Ack(t.Context(), "00000000-0000-0000-0000-000000000000"); !errors.Is(err, mq.ErrClosed) {
		t.Errorf("Ack on a closed database: %v, want ErrClosed", err)
	}
}

// TestExpiredDedupIDsAreSwept: ids past their window are deleted, beside a later
// write that remembers ids (at most once a second), so the table holds about a
// window's worth of ids, not every id ever seen.
func TestExpiredDedupIDsAreSwept(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	q, err := postgres.Open(t.Context(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 8}, Now: clock})
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
	mu.Lock()
	now = now.Add(mq.DefaultDedupWindow + time.Second)
	mu.Unlock()
	if err := q.Enqueue(t.Context(), mq.Message{Queue: "q", DedupID: "new"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for count() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d remembered ids 10 s after the window ended, want 1 (the expired ones swept)", count())
		}
		time.Sleep(10 * time.Millisecond) // the sweep runs in the background
	}
}

// TestDuplicateKeyInCallersTxNeedsNoOtherConnection: a duplicate message key met
// by EnqueueTx is reported from the caller's transaction alone. Asking another
// connection which key it was waited for ever once such transactions held every
// connection of the pool (found racing StartOrchestrationWith on a pool of 4).
func TestDuplicateKeyInCallersTxNeedsNoOtherConnection(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	q, err := postgres.Open(t.Context(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := q.Enqueue(ctx, mq.Message{Queue: "q", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	var txs []*sqlx.Tx
	for range 2 { // every connection of the pool
		tx, err := q.DB().BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		txs = append(txs, tx)
	}
	for i, tx := range txs {
		if err := q.EnqueueTx(ctx, tx, mq.Message{Queue: "q", Key: "k"}); !errors.Is(err, mq.ErrDuplicateKey) {
			t.Fatalf("EnqueueTx %d of a pending key with the pool held = %v, want ErrDuplicateKey", i, err)
		}
	}
}

// openOneSession opens a queue on a pool of one connection, so that the session's
// prepared statements (pg_prepared_statements) are the queue's.
func openOneSession(t *testing.T) *postgres.Queue {
	t.Helper()
	dsn, schema := pgtest.Schema(t)
	return openWith(t, dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 1}})
}

// TestHotStatementsArePlannedOnce runs the dequeue and settle statements round
// after round on one connection, in transactions of the caller's own (duroq's
// own force plans made once, see pgsql.Begin; a caller's run under the server's
// settings), and checks, in pg_prepared_statements, that PostgreSQL settled on
// one plan for each: it makes plans for a run's arguments five times, then keeps
// its plan for any arguments unless that one looks costlier. A statement planned
// at every run pays its planning (0.6 ms for the scan, against 0.1 ms to run it)
// every time.
func TestHotStatementsArePlannedOnce(t *testing.T) {
	ctx := t.Context()
	q := openOneSession(t)
	// A backlog with planner statistics: the plans' costs then depend on it.
	var msgs []mq.Message
	for i := range 3000 {
		msgs = append(msgs, mq.Message{Queue: "q", Payload: []byte("u")}, mq.Message{Queue: "q", RoutingKey: fmt.Sprintf("k%d", i), Payload: []byte("k")})
	}
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if _, err := q.DB().ExecContext(ctx, `ANALYZE mq_messages`); err != nil {
		t.Fatal(err)
	}
	const rounds, hotRuns = 40, 20 // lockKeys runs in the rounds that take a key
	for r := range rounds {
		tx, err := q.DB().BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := q.DequeueManyTx(ctx, tx, "q", mq.DequeueOptions{}, 1+r%4) // a different max each round
		if err != nil || len(bs) == 0 {
			t.Fatalf("round %d: DequeueManyTx = %d batches, %v", r, len(bs), err)
		}
		for _, b := range bs {
			if err := q.AckTx(ctx, tx, b.Token); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	var stmts []struct {
		Statement string `db:"statement"`
		Custom    int    `db:"custom_plans"`
		Generic   int    `db:"generic_plans"`
	}
	if err := q.DB().SelectContext(ctx, &stmts, `SELECT statement, custom_plans, generic_plans FROM pg_prepared_statements`); err != nil {
		t.Fatal(err)
	}
	hot := 0
	for _, s := range stmts {
		if s.Custom+s.Generic < hotRuns {
			continue
		}
		hot++
		if s.Custom > 5 {
			t.Errorf("planned for its arguments %d times in %d runs: %.100s", s.Custom, s.Custom+s.Generic, strings.Join(strings.Fields(s.Statement), " "))
		}
	}
	if hot < 3 {
		t.Fatalf("only %d statements ran %d times or more; the test sees too little", hot, hotRuns)
	}
}

// TestScanWithoutStatisticsWalksItsIndexes checks the plan duroq's transactions
// keep for the scan (a generic plan, made once per connection) when it was made
// while the queue had no statistics:
//   - the scan reads the ready index in eligibility order and stops at its limit. A
//     bitmap scan reads every ready message and sorts them: 300-400 ms per scan of
//     40,000 messages in duroq bench queue, until the statistics guard's ANALYZE
//     replaced the plan;
//   - the probe for a key's older messages reads the key's entries of the routing
//     index. A plan that reads the queue's ready index instead reads every ready
//     message for each message the scan reads (2 s per scan at 5,000 messages in
//     duroq bench seq).
func TestScanWithoutStatisticsWalksItsIndexes(t *testing.T) {
	ctx := t.Context()
	q := openOneSession(t)
	// No statistics (a new schema; autovacuum off), and too few pages for the
	// queue's statistics guard to analyse the table.
	if _, err := q.DB().ExecContext(ctx, `ALTER TABLE mq_messages SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	var msgs []mq.Message
	for i := range 400 {
		msgs = append(msgs, mq.Message{Queue: "q", RoutingKey: fmt.Sprintf("k%d", i), Payload: []byte("m")})
	}
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	bs, err := q.DequeueBatches(ctx, "q", mq.DequeueOptions{}, 2)
	if err != nil || len(bs) != 2 {
		t.Fatalf("DequeueBatches = %d batches, %v; want 2", len(bs), err)
	}
	// The statement as the scan prepared it, planned again (as a new connection
	// would) once the queue holds 40,000 messages the guard has not seen: a queue
	// filled by another process, or faster than the guard's checks.
	var stmt struct {
		Text  string `db:"statement"`
		Types string `db:"types"`
		N     int    `db:"n"`
	}
	if err := q.DB().GetContext(ctx, &stmt, `SELECT statement, array_to_string(parameter_types, ',') AS types, cardinality(parameter_types) AS n
		FROM pg_prepared_statements
		WHERE statement LIKE 'WITH g AS MATERIALIZED%' AND statement LIKE '%o.routing_key = m.routing_key%'`); err != nil {
		t.Fatalf("the scan among the session's prepared statements: %v", err)
	}
	if _, err := q.DB().ExecContext(ctx, `INSERT INTO mq_messages (queue, payload, enqueued_at, visible_at)
		SELECT 'q', '\x6d', 1, i FROM generate_series(1, 40000) AS i`); err != nil {
		t.Fatal(err)
	}
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", stmt.N), ", ")
	var plan []string
	err = pgsql.Run(ctx, q.DB(), func(tx *sqlx.Tx) error { // the settings duroq's transactions plan with
		if _, err := tx.ExecContext(ctx, `PREPARE scan_again(`+stmt.Types+`) AS `+stmt.Text); err != nil {
			return err
		}
		if err := tx.SelectContext(ctx, &plan, `EXPLAIN EXECUTE scan_again(`+nulls+`)`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DEALLOCATE scan_again`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	probes := 0
	for _, line := range plan {
		if strings.Contains(line, " on mq_messages m ") && !strings.Contains(line, "Index Scan using mq_messages_ready on mq_messages m ") {
			t.Errorf("the scan: %s; want an index scan of the ready index\n%s", strings.TrimSpace(line), strings.Join(plan, "\n"))
		}
		if strings.Contains(line, " on mq_messages o ") {
			probes++
			if !strings.Contains(line, "mq_messages_routing") {
				t.Errorf("the key-head probe: %s; want the routing index\n%s", strings.TrimSpace(line), strings.Join(plan, "\n"))
			}
		}
	}
	if probes == 0 {
		t.Fatalf("no probe of mq_messages o in the plan:\n%s", strings.Join(plan, "\n"))
	}
}

func TestLockTokensAreTimeOrderedAndDistinct(t *testing.T) {
	q, _, _ := openSchema(t)
	mqtest.LockTokensAreTimeOrderedAndDistinct(t, q)
}
