package wake

import "sync"

// Watchers hands out channels closed when their key is notified, like Hub, for
// keys that come and go (one per instance a client waits for): a watcher that
// gives up releases its key, so keys nobody notifies do not accumulate.
type Watchers struct {
	mu      sync.Mutex
	watches map[string]*watch
	closed  bool // see Close
}

// closedChan is the channel of every watch taken after Close.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// watch is one key's channel and how many watchers hold it.
type watch struct {
	ch      chan struct{}
	holders int
}

// Watch returns a channel closed by the next Notify of key (or NotifyAll) and a
// function that ends this watch, to be called once the caller stops waiting,
// whether the channel closed or not. Take the channel before checking what it
// announces, so a notification in between is not missed.
func (w *Watchers) Watch(key string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return closedChan, func() {}
	}
	if w.watches == nil {
		w.watches = make(map[string]*watch)
	}
	x, ok := w.watches[key]
	if !ok {
		x = &watch{ch: make(chan struct{})}
		w.watches[key] = x
	}
	x.holders++
	var once sync.Once
	return x.ch, func() { once.Do(func() { w.release(key, x) }) }
}

// release ends one hold of x, forgetting key's watch when it was the last one (a
// notified watch is forgotten already, and key may have a newer one).
func (w *Watchers) release(key string, x *watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x.holders--; x.holders == 0 && w.watches[key] == x {
		delete(w.watches, key)
	}
}

// Notify closes the channel of key's watchers, if any.
func (w *Watchers) Notify(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x, ok := w.watches[key]; ok {
		close(x.ch)
		delete(w.watches, key)
	}
}

// NotifyAll closes every watcher's channel (after notifications may have been
// lost).
func (w *Watchers) NotifyAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notifyAll()
}

func (w *Watchers) notifyAll() {
	for key, x := range w.watches {
		close(x.ch)
		delete(w.watches, key)
	}
}

// Close closes every watcher's channel, and a watch taken after it is closed at
// once: nobody waits on what is closing.
func (w *Watchers) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.notifyAll()
}

// Keys returns the keys being watched.
func (w *Watchers) Keys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(w.watches))
	for key := range w.watches {
		keys = append(keys, key)
	}
	return keys
}
