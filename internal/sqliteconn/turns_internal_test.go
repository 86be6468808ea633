package sqliteconn

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

// The writer's lock goes to its waiters in arrival order, those that asked to go
// first before the others, and to one holder at a time.
func TestTurnsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			l       turns
			mu      sync.Mutex
			order   []string
			holders int
			wg      sync.WaitGroup
		)
		waiter := func(name string, first bool) {
			wg.Go(func() {
				l.lock(first)
				mu.Lock()
				if holders++; holders > 1 {
					t.Errorf("%s holds the lock with another holder", name)
				}
				order = append(order, name)
				mu.Unlock()
				mu.Lock()
				holders--
				mu.Unlock()
				l.unlock()
			})
			synctest.Wait() // queued before the next one comes
		}
		l.lock(false)
		waiter("batch 1", false)
		waiter("batch 2", false)
		waiter("client 1", true)
		waiter("batch 3", false)
		waiter("client 2", true)
		l.unlock()
		wg.Wait()
		want := []string{"client 1", "client 2", "batch 1", "batch 2", "batch 3"}
		if !slices.Equal(order, want) {
			t.Errorf("the lock went to %v, want %v", order, want)
		}
		// Released with nobody waiting, it is free: lock does not wait.
		l.lock(true)
		l.unlock()
		l.lock(false)
		l.unlock()
	})
}
