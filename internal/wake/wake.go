// Package wake lets goroutines of one process wait for "something changed in queue Q"
// without polling.
package wake

import "sync"

// Hub hands out channels that are closed when their queue is notified.
type Hub struct {
	mu    sync.Mutex
	chans map[string]chan struct{}
}

// Chan returns a channel that is closed by the next Notify of queue. Take the channel
// before checking for work, so a notification between the check and the wait is not
// missed.
func (h *Hub) Chan(queue string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.chans == nil {
		h.chans = make(map[string]chan struct{})
	}
	ch, ok := h.chans[queue]
	if !ok {
		ch = make(chan struct{})
		h.chans[queue] = ch
	}
	return ch
}

// NotifyAll wakes every waiting goroutine, whatever its queue (on Close).
func (h *Hub) NotifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for queue, ch := range h.chans {
		close(ch)
		delete(h.chans, queue)
	}
}

// Notify wakes every goroutine waiting on queue.
func (h *Hub) Notify(queue string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch, ok := h.chans[queue]; ok {
		close(ch)
		delete(h.chans, queue)
	}
}
