package postgres

import (
	"context"
	"time"
)

// The dequeue statements walk the (queue, visible_at, id) index, which the planner
// chooses once mq_messages has column statistics. Without them (a backlog loaded into
// a new schema, before autovacuum's first ANALYZE) it guesses a handful of rows and
// sorts every visible message of the queue instead, on every dequeue: 10 ms a dequeue
// at 10,000 messages where the index takes 0.1 ms. So a dequeuing Queue checks, at most
// every statsCheckEvery until the table has statistics, and analyses the table itself
// once it holds at least analyzeBytes.
const (
	statsCheckEvery = 5 * time.Second
	analyzeBytes    = 32 * 8192 // 32 pages: about a thousand small messages
)

// ensureStats analyses mq_messages if it has no statistics yet and is large enough
// for them to matter (see above). Failures are logged and retried at the next check:
// the dequeue is correct either way, only slower.
func (q *Queue) ensureStats(ctx context.Context) {
	if q.statsKnown.Load() {
		return
	}
	now := time.Now().UnixNano()
	last := q.statsCheckedAt.Load()
	if (last != 0 && now-last < int64(statsCheckEvery)) || !q.statsCheckedAt.CompareAndSwap(last, now) {
		return
	}
	var known, large bool
	err := q.db.QueryRowContext(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = current_schema() AND tablename = 'mq_messages'),
		pg_relation_size('mq_messages') >= $1`, analyzeBytes).Scan(&known, &large)
	switch {
	case err != nil:
		q.log.Debug("mq/postgres: reading mq_messages statistics failed", "err", err)
		return
	case known:
		q.statsKnown.Store(true)
		return
	case !large:
		return
	}
	began := time.Now()
	if _, err := q.db.ExecContext(ctx, `ANALYZE mq_messages`); err != nil {
		q.log.Debug("mq/postgres: ANALYZE mq_messages failed", "err", err)
		return
	}
	q.statsKnown.Store(true)
	q.log.Debug("mq/postgres: analysed mq_messages, which had no statistics", "took", time.Since(began))
}
