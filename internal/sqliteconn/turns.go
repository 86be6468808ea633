package sqliteconn

import "sync"

// turns is the Writer's mutual exclusion: a lock handed to its waiters in the
// order they came, except that a waiter that asked to go first is handed it before
// every waiter that did not. A client's small write that no transaction carried
// (RunAlong) then waits for the transaction in progress only, not for every
// runtime batch queued before it; the batches it passes grow by what arrives
// meanwhile.
type turns struct {
	mu           sync.Mutex
	held         bool
	first, after []chan struct{} // the waiters of each kind, in arrival order
}

// lock waits for the lock; first puts the caller ahead of the waiters that did
// not ask to.
func (t *turns) lock(first bool) {
	t.mu.Lock()
	if !t.held {
		t.held = true
		t.mu.Unlock()
		return
	}
	granted := make(chan struct{})
	if first {
		t.first = append(t.first, granted)
	} else {
		t.after = append(t.after, granted)
	}
	t.mu.Unlock()
	<-granted // unlock handed the lock over: it stays held
}

// unlock hands the lock to the next waiter, or releases it.
func (t *turns) unlock() {
	t.mu.Lock()
	defer t.mu.Unlock()
	var next chan struct{}
	switch {
	case len(t.first) > 0:
		next, t.first = t.first[0], t.first[1:]
	case len(t.after) > 0:
		next, t.after = t.after[0], t.after[1:]
	default:
		t.held = false
		return
	}
	close(next)
}
