package postgres

import "context"

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
