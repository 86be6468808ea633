package pgsql

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
)

// StatsGuard gives tables planner statistics when autovacuum has not yet, and keeps
// them in step while a table is young and grows fast. duroq's statements rely on
// the planner walking indexes, which it does once a table has column statistics
// that match its size. Without them (a backlog or history loaded into a new
// schema, before autovacuum's first ANALYZE, within a minute by default) it
// guesses a handful of rows and sorts or scans whole tables instead: a queue
// dequeue took 10 ms at 10,000 messages where the index takes 0.1 ms, and reading
// 64 streams' states scanned every stream. Statistics of a few pages go stale the
// same way as the table grows, and a plan made from them stays what it was until
// an ANALYZE invalidates it (duroq's transactions keep their plans, see Begin):
// clearing the version pins of 32 instances read every key row of the queue,
// 7 ms per statement with 20,000 instances. So the hot paths call Ensure, which
// starts a check at most every statsCheckEvery; the check analyses each table
// that has no statistics once it holds minPages pages, and each table that has
// doubled since its statistics were taken (pg_class.relpages, which ANALYZE and
// VACUUM set) while those counted fewer than maxTrackedPages pages: past that,
// autovacuum's ANALYZE after a tenth of the rows changed keeps up. The check runs
// in the background on a connection of its own: the caller may hold the pool's last
// connection in a transaction. Processes sharing the tables check in turn (see
// check). Set DB and Tables; call Close before closing DB.
type StatsGuard struct {
	DB     *sqlx.DB
	Tables []string     // in the schema of DB's search_path
	Log    *slog.Logger // nil: silent

	settled   atomic.Bool  // every table's statistics count maxTrackedPages or more
	checkedAt atomic.Int64 // unix nanoseconds of the last check

	mu     sync.Mutex
	closed bool
	cancel context.CancelFunc // of the check running, if any
	checks sync.WaitGroup
}

const (
	statsCheckEvery = time.Second
	// minPages: below it a bad plan costs little, and statistics of a few rows
	// would soon be wrong.
	minPages = 8
	// maxTrackedPages (64 MiB of 8 KiB pages): statistics counting more are left
	// to autovacuum.
	maxTrackedPages = 8192
)

// Ensure starts a check of the guard's tables (see StatsGuard) unless every one has
// statistics of maxTrackedPages or more, one ran within statsCheckEvery or one is
// running. It never waits.
func (g *StatsGuard) Ensure() {
	if g.settled.Load() {
		return
	}
	now := time.Now().UnixNano()
	last := g.checkedAt.Load()
	if (last != 0 && now-last < int64(statsCheckEvery)) || !g.checkedAt.CompareAndSwap(last, now) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.checks.Go(func() {
		g.check(ctx)
		g.mu.Lock()
		g.cancel = nil
		g.mu.Unlock()
		cancel()
	})
}

// Close stops a check in progress and waits for it.
func (g *StatsGuard) Close() {
	g.mu.Lock()
	g.closed = true
	if g.cancel != nil {
		g.cancel()
	}
	g.mu.Unlock()
	g.checks.Wait()
}

// statsLockKey is the advisory lock a check holds, one per schema and table list:
// the processes sharing the tables take turns, and the one that finds another
// checking leaves it to that one.
const statsLockKey = `hashtextextended(current_schema() || ':' || array_to_string($1::text[], ','), 0)`

// check analyses the tables that have no statistics yet and are large enough for
// them to matter, and those that doubled since their statistics were taken. It
// reads and analyses in one transaction holding statsLockKey, so two processes
// whose checks overlap do not both analyse a table: every ANALYZE invalidates the
// plans every connection of every process cached for the table, and a second one
// costs a second round of planning for nothing. Failures are logged and retried at
// the next check: the statements are correct either way, only slower.
func (g *StatsGuard) check(ctx context.Context) {
	log := g.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tx, err := g.DB.BeginTxx(ctx, nil)
	if err != nil {
		log.Debug("pgdb: checking planner statistics failed", "err", err)
		return
	}
	defer func() { _ = tx.Rollback() }()
	var mine bool
	if err := tx.GetContext(ctx, &mine, `SELECT pg_try_advisory_xact_lock(`+statsLockKey+`)`, g.Tables); err != nil {
		log.Debug("pgdb: checking planner statistics failed", "err", err)
		return
	}
	if !mine {
		log.Debug("pgdb: another process is checking these tables' planner statistics", "tables", g.Tables)
		return // the next Ensure looks again
	}
	var rows []struct {
		Table   string `db:"t"`
		Known   bool   `db:"known"`
		Pages   int64  `db:"pages"`   // now
		Counted int64  `db:"counted"` // when the statistics were taken
	}
	err = tx.SelectContext(ctx, &rows, `SELECT t,
		EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = current_schema() AND tablename = t) AS known,
		pg_relation_size(t::regclass) / current_setting('block_size')::bigint AS pages,
		(SELECT greatest(relpages, 0) FROM pg_class WHERE oid = t::regclass) AS counted
		FROM unnest($1::text[]) AS t`, g.Tables)
	if err != nil {
		log.Debug("pgdb: reading planner statistics failed", "err", err)
		return
	}
	settled := true
	for _, r := range rows {
		stale := r.Known && r.Counted < maxTrackedPages && r.Pages >= 2*max(r.Counted, minPages)
		if !stale && (r.Known || r.Pages < minPages) {
			settled = settled && r.Known && r.Counted >= maxTrackedPages
			continue
		}
		began := time.Now()
		// The name comes from the guard's own list, never from input.
		if _, err := tx.ExecContext(ctx, `ANALYZE `+r.Table); err != nil {
			log.Debug("pgdb: ANALYZE failed", "table", r.Table, "err", err)
			return // the transaction is aborted; the next check tries again
		}
		log.Debug("pgdb: analysed a table whose planner statistics were missing or stale", "table", r.Table, "pages", r.Pages, "counted", r.Counted, "took", time.Since(began))
		settled = settled && r.Pages >= maxTrackedPages
	}
	if err := tx.Commit(); err != nil {
		log.Debug("pgdb: committing planner statistics failed", "err", err)
		return
	}
	g.settled.Store(settled)
}
