package sqliteconn

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/jmoiron/sqlx"
)

// Watcher notices commits to a database file made by anyone, other processes
// included, which SQLite does not signal. Every commit writes the write-ahead log
// (or, without WAL, the database file), so it asks the operating system to report
// writes to those files (fsnotify: inotify, kqueue, ...), which costs nothing while
// nothing happens; where that is unavailable it looks at their size and time every
// watchFast to watchIdle. It runs while it has subscribers.
//
// Writes seen while this process's Writer also committed (or checkpointed) may be
// only its own, whose waiters the committer wakes itself: they are passed on at
// most every watchIdle, so that a busy process does not wake its idle waiters at
// every commit, while another process's commit among its own still reaches them
// within watchIdle. Writes while this process wrote nothing are passed on at once.
type Watcher struct {
	db  *sqlx.DB
	w   *Writer
	off bool // an in-memory database: nothing to watch

	mu      sync.Mutex
	subs    map[int]func()
	nextID  int
	stop    chan struct{} // closed to stop the watching goroutine; nil when none runs
	stopped chan struct{}
}

const (
	// watchFast and watchIdle bound the polling interval of the fallback, which
	// backs off from one to the other while nothing changes.
	watchFast = time.Millisecond
	watchIdle = 10 * time.Millisecond
	// settleWrites is how long the watcher lets the writes of a commit come before it
	// looks at the files: it bounds its wake-ups under load.
	settleWrites = time.Millisecond
)

var watchers sync.Map // *sqlx.DB → *Watcher

// newEvents makes the operating system's file notifications (a variable so that a
// test can take them away and exercise the fallback).
var newEvents = fsnotify.NewWatcher

// WatcherOf returns the watcher of db.
func WatcherOf(db *sqlx.DB) *Watcher {
	w, _ := watchers.LoadOrStore(db, &Watcher{db: db, w: WriterOf(db), subs: map[int]func(){}})
	return w.(*Watcher)
}

// Subscribe calls changed (on the watcher's goroutine: it must not block) after
// commits to the database made once Subscribe returned; the returned function ends
// the subscription.
func (w *Watcher) Subscribe(changed func()) (unsubscribe func()) {
	if w.off {
		return func() {}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.nextID
	w.nextID++
	w.subs[id] = changed
	if w.stop == nil {
		w.stop, w.stopped = make(chan struct{}), make(chan struct{})
		ready := make(chan struct{})
		go w.run(w.stop, w.stopped, ready)
		<-ready
	}
	return func() {
		w.mu.Lock()
		delete(w.subs, id)
		var stop, stopped chan struct{}
		if len(w.subs) == 0 {
			stop, stopped = w.detach()
		}
		w.mu.Unlock()
		finish(stop, stopped)
	}
}

// halt stops watching (the database is being closed); a later subscription starts
// again.
func (w *Watcher) halt() {
	w.mu.Lock()
	stop, stopped := w.detach()
	w.mu.Unlock()
	finish(stop, stopped)
}

// detach takes the running goroutine's channels (nil if none runs); w.mu is held.
func (w *Watcher) detach() (stop, stopped chan struct{}) {
	stop, stopped = w.stop, w.stopped
	w.stop, w.stopped = nil, nil
	return stop, stopped
}

// finish stops a goroutine detach took and waits for it.
func finish(stop, stopped chan struct{}) {
	if stop != nil {
		close(stop)
		<-stopped
	}
}

func (w *Watcher) notify() {
	w.mu.Lock()
	subs := make([]func(), 0, len(w.subs))
	for _, f := range w.subs {
		subs = append(subs, f)
	}
	w.mu.Unlock()
	for _, f := range subs {
		f()
	}
}

// run watches the database's files until stop is closed; ready is closed once it
// watches.
func (w *Watcher) run(stop <-chan struct{}, stopped, ready chan<- struct{}) {
	defer close(stopped)
	var path string
	err := w.db.QueryRowx(`SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path)
	if err != nil || path == "" {
		close(ready)
		return // closed, or a temporary database no other process shares
	}
	f := &filter{w: w, ownSeen: w.w.writes.Load()}
	events, err := newEvents()
	if err == nil {
		err = events.Add(filepath.Dir(path))
	}
	if err != nil {
		if events != nil {
			events.Close()
		}
		w.poll(path, f, stop, ready)
		return
	}
	defer events.Close()
	close(ready)
	files := []string{filepath.Clean(path), filepath.Clean(path) + "-wal"}
	for {
		var due <-chan time.Time
		if f.owed {
			due = time.After(f.wait())
		}
		select {
		case <-stop:
			return
		case ev, ok := <-events.Events:
			if !ok {
				return
			}
			if !ev.Has(fsnotify.Write|fsnotify.Create) || filepath.Clean(ev.Name) != files[0] && filepath.Clean(ev.Name) != files[1] {
				continue
			}
			// A commit is several writes: let them come, and the kernel merge those
			// not read yet, then look once.
			select {
			case <-stop:
				return
			case <-time.After(settleWrites):
			}
			drain(events.Events)
			f.changed()
		case <-events.Errors: // lost events (a queue overflow): something may have changed
			f.send()
		case <-due:
		}
		f.flush()
	}
}

// drain discards the events already queued on events.
func drain(events <-chan fsnotify.Event) {
	for {
		select {
		case <-events:
		default:
			return
		}
	}
}

// poll is run's fallback: it compares the files' size and time every watchFast,
// backing off to watchIdle while nothing changes.
func (w *Watcher) poll(path string, f *filter, stop <-chan struct{}, ready chan<- struct{}) {
	seen := statFiles(path)
	close(ready)
	interval := watchFast
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if st := statFiles(path); st != seen {
			f.changed()
			seen, interval = st, watchFast
		} else {
			interval = min(interval*2, watchIdle)
		}
		f.flush()
		t.Reset(interval)
	}
}

// filter decides when a write to the database reaches the subscribers: at once
// unless this process's writer committed since the last write seen, else within
// watchIdle.
type filter struct {
	w        *Watcher
	ownSeen  uint64 // the writer's writes (commits, checkpoints) at the last write seen
	owed     bool   // a write not passed on yet
	lastSent time.Time
}

// changed records a write.
func (f *filter) changed() {
	own := f.w.w.writes.Load()
	if own != f.ownSeen {
		f.ownSeen, f.owed = own, true
		return
	}
	f.send()
}

// wait is how long an owed write still waits.
func (f *filter) wait() time.Duration { return max(watchIdle-time.Since(f.lastSent), 0) }

// flush passes an owed write on once watchIdle has passed since the last one.
func (f *filter) flush() {
	if f.owed && f.wait() == 0 {
		f.send()
	}
}

func (f *filter) send() {
	f.owed, f.lastSent = false, time.Now()
	f.w.notify()
}

// fileState is what a commit changes in a database's files.
type fileState struct {
	walSize, dbSize int64
	walTime, dbTime time.Time
}

func statFiles(path string) fileState {
	var st fileState
	if fi, err := os.Stat(path + "-wal"); err == nil {
		st.walSize, st.walTime = fi.Size(), fi.ModTime()
	}
	if fi, err := os.Stat(path); err == nil {
		st.dbSize, st.dbTime = fi.Size(), fi.ModTime()
	}
	return st
}
