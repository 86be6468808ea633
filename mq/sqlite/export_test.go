package sqlite

// EnqueueRounds reports how many transactions q's Enqueue calls shared.
func EnqueueRounds(q *Queue) int64 { return q.enqueues.Rounds() }
