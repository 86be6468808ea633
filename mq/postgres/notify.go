package postgres

import (
	"context"
	"slices"
	"sync"
	"time"
)

// notifier sends this process's wake-ups (and signals, see Signal) to the other
// processes after the writes that made them commit, coalesced: the queues and
// signals named while one NOTIFY statement is under way go out together in the
// next. A NOTIFY inside a writing transaction would hold PostgreSQL's
// database-wide notification lock from its commit until its WAL flush, so every
// notifying commit of every process would flush alone (see doc.go); a statement
// that only notifies writes no WAL and holds that lock for microseconds.
type notifier struct {
	mu      sync.Mutex
	pending []string      // queues named since the last send began
	signals []string      // signal keys named since the last send began (see signalKey)
	sent    chan struct{} // while a sender goroutine runs: closed when it ends
}

// notifyEvery spaces one process's NOTIFY statements: after one, the sender waits
// this long before the next, so that under load the wake-ups of many commits share
// a statement (each is a round trip and a commit of the server's); a lone commit's
// wake-up still goes out at once.
const notifyEvery = 2 * time.Millisecond

// notifyTimeout bounds one NOTIFY statement: a server that does not answer costs
// the other processes their wake-ups (they poll at their deadlines), never a caller.
const notifyTimeout = 5 * time.Second

// wake wakes the long polls of queues: this process's at once, the other
// processes' through the notifier.
func (q *Queue) wake(queues ...string) {
	if len(queues) == 0 {
		return
	}
	for _, name := range queues {
		q.hub.Notify(name)
	}
	q.notes.add(q, queues, nil)
}

// add names queues and signal keys for the next NOTIFY statement, starting q's
// sender if none runs.
func (n *notifier) add(q *Queue, queues, signals []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, name := range queues {
		if !slices.Contains(n.pending, name) {
			n.pending = append(n.pending, name)
		}
	}
	n.signals = append(n.signals, signals...) // a duplicate only wakes a watcher twice
	if n.sent == nil {
		n.sent = make(chan struct{})
		go q.sendNotes()
	}
}

// sendNotes sends the pending wake-ups, at most one statement per notifyEvery,
// until none is left.
func (q *Queue) sendNotes() {
	n := &q.notes
	for {
		n.mu.Lock()
		names, signals := n.pending, n.signals
		n.pending, n.signals = nil, nil
		if len(names) == 0 && len(signals) == 0 {
			close(n.sent)
			n.sent = nil
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		_, err := q.db.ExecContext(ctx, notifySQL, names, signals)
		cancel()
		if err != nil {
			q.log.Warn("mq/postgres: could not notify other processes; their long polls and watches wait for their deadlines",
				"queues", names, "signals", len(signals), "err", err)
		}
		time.Sleep(notifyEvery)
	}
}

// notifySQL sends the queues' wake-ups ($1) and the signals ($2) in one statement.
const notifySQL = `SELECT pg_notify(c, n) FROM (
	SELECT ` + channelExpr + ` AS c, unnest($1::text[]) AS n
	UNION ALL
	SELECT ` + signalChannelExpr + `, unnest($2::text[])) AS notes`

// drain waits until the wake-ups named so far are sent.
func (n *notifier) drain() {
	n.mu.Lock()
	sent := n.sent
	n.mu.Unlock()
	if sent != nil {
		<-sent
	}
}
