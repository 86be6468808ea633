package postgres

import (
	"context"
	"time"
)

// Retries reports how many transient failures (deadlocks, serialization failures,
// lost connections) q retried.
func Retries(q *Queue) int64 { return q.retries.Load() }

// Losses reports how many dequeue attempts of q lost their candidate's key or
// session to another consumer.
func Losses(q *Queue) int64 { return q.losses.Load() }

// Channel is the NOTIFY channel q's listener LISTENs on.
func Channel(ctx context.Context, q *Queue) (string, error) {
	var ch string
	err := q.db.GetContext(ctx, &ch, `SELECT `+channelExpr)
	return ch, err
}

// NotifyEvery spaces one Queue's NOTIFY statements.
const NotifyEvery = notifyEvery

// SetLaneLinger sets how long q's enqueue rounds keep their connection after a
// round (default laneLinger); call it before q's first Enqueue.
func SetLaneLinger(q *Queue, d time.Duration) {
	q.lane.mu.Lock()
	defer q.lane.mu.Unlock()
	q.lane.linger = d
}

// DrainNotes waits until q has sent the wake-ups of its writes so far to other
// processes (its NOTIFY statements run on pool connections of their own).
func DrainNotes(q *Queue) { q.notes.drain() }
