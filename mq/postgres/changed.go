package postgres

import (
	"sync"
	"time"
)

// changedKey names the hub channel of Changed: no queue has an empty name.
const changedKey = ""

// changedEvery spaces the wake-ups of Changed's waiters: the first notification
// after a quiet spell wakes them at once, later ones at most this often, so that a
// client waiting for one instance while other processes commit hundreds of times a
// second reads its state a bounded number of times.
const changedEvery = 5 * time.Millisecond

// changes paces the wake-ups of Changed's waiters (see changedEvery).
type changes struct {
	mu      sync.Mutex
	last    time.Time // when the last wake-up went out
	pending bool      // a wake-up is due at the end of the current spell
}

// Changed returns a channel closed once a commit of any process that woke
// consumers (an enqueue, an acked or released batch) is notified to this one,
// within changedEvery of the notification, and at Close. It starts the queue's
// LISTEN connection if none runs, so that a process that only waits (a web
// process's clients) listens too; with a pool of one connection there is none, and
// the channel closes only at Close. Take it before reading the state it waits for,
// so that a change in between is not missed. The runtime's clients wait on it for
// an instance that another process runs (runtime/provider.ChangeNotifier).
func (q *Queue) Changed() <-chan struct{} {
	ch := q.hub.Chan(changedKey)
	q.startListening()
	return ch
}

// changed wakes Changed's waiters, at once or at the end of the current spell.
func (q *Queue) changed() {
	c := &q.changes
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending {
		return
	}
	if wait := changedEvery - time.Since(c.last); wait > 0 {
		c.pending = true
		time.AfterFunc(wait, func() {
			c.mu.Lock()
			c.pending, c.last = false, time.Now()
			c.mu.Unlock()
			q.hub.Notify(changedKey)
		})
		return
	}
	c.last = time.Now()
	q.hub.Notify(changedKey)
}
