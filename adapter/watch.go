package adapter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/wake"
)

// instanceFeed is the InstanceWatcher of a provider whose queue reports changes
// of the whole storage (mq/sqlite's Changed: a watcher of the database file) but
// carries no signals between processes. At each change, one read of the watched
// instances' stream metadata wakes the watchers of those that changed: N clients
// waiting in a process cost one read per change, where each woke and read its
// instance at every change before (200 waiting clients read their instances
// 45,000 times in 5 s while a worker ran, see the performance page).
type instanceFeed struct {
	s       eventstore.EventStore
	changed func() <-chan struct{}

	watchers wake.Watchers // by instance

	mu     sync.Mutex
	marks  map[string]*streamMark // what the watchers of an instance have seen
	stop   chan struct{}          // closed by close; nil until the feed runs
	done   chan struct{}          // closed when the feed's goroutine returns
	closed bool
}

// streamMark is what changes in an instance's stream when a waiting client may
// be done: its execution ended or continued as new, its custom status or KV state
// changed (each write bumps the stream's update time).
type streamMark struct {
	state streamState
	// unwatched: the last check found no watcher. A mark is kept for one check
	// without watchers, so that a client that was woken and reads its instance can
	// watch it again without reading its mark anew.
	unwatched bool
}

type streamState struct {
	exists        bool
	updated       int64 // Unix microseconds
	status        eventstore.Status
	partition     int64
	customVersion int64
}

func stateOf(info eventstore.StreamInfo) streamState {
	return streamState{exists: true, updated: info.UpdatedAt.UnixMicro(), status: info.Status,
		partition: info.CurrentPartition, customVersion: info.CustomStatusVersion}
}

// feedTimeout bounds a read of the feed.
const feedTimeout = 10 * time.Second

func newInstanceFeed(s eventstore.EventStore, changed func() <-chan struct{}) *instanceFeed {
	return &instanceFeed{s: s, changed: changed, marks: map[string]*streamMark{}}
}

// watch returns a channel closed once the feed sees instance change, and the
// function that ends the watch; a nil channel if the instance's state could not
// be read. The state it compares against is read now, before the caller reads
// the instance, unless a watch of the instance has it already.
func (f *instanceFeed) watch(ctx context.Context, instance string) (<-chan struct{}, func()) {
	f.mu.Lock()
	_, known := f.marks[instance]
	known = known || f.closed // nothing to read: the watch is closed below
	f.mu.Unlock()
	var state streamState
	if !known {
		info, err := f.s.Stream(ctx, instance)
		switch {
		case errors.Is(err, eventstore.ErrNotFound):
		case err != nil:
			return nil, func() {}
		default:
			state = stateOf(info)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		if m, ok := f.marks[instance]; ok {
			m.unwatched = false // a check since this call began may have set it
		} else {
			f.marks[instance] = &streamMark{state: state}
		}
		if f.stop == nil {
			f.stop, f.done = make(chan struct{}), make(chan struct{})
			go f.run(f.stop, f.done)
		}
	}
	return f.watchers.Watch(instance) // closed at once after close
}

// run checks the watched instances at every change of the storage until stop.
func (f *instanceFeed) run(stop, done chan struct{}) {
	defer close(done)
	for {
		changed := f.changed() // taken before the check: a change in between is not missed
		f.check()
		select {
		case <-stop:
			return
		case <-changed:
		}
	}
}

// check reads the state of every watched instance and wakes the watchers of those
// whose state is not the one they saw. If the read fails, it wakes them all: they
// read their instances themselves.
func (f *instanceFeed) check() {
	watched := map[string]bool{}
	for _, name := range f.watchers.Keys() {
		watched[name] = true
	}
	f.mu.Lock()
	names := make([]string, 0, len(watched))
	for name, m := range f.marks {
		switch {
		case watched[name]:
			names = append(names, name)
		case m.unwatched:
			delete(f.marks, name)
		default:
			m.unwatched = true
		}
	}
	f.mu.Unlock()
	if len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), feedTimeout)
	infos, err := f.s.ListStreamInfos(ctx, eventstore.StreamFilter{Streams: names})
	cancel()
	states := make(map[string]streamState, len(infos))
	for _, info := range infos {
		states[info.Stream] = stateOf(info)
	}
	f.mu.Lock()
	var changed []string
	for _, name := range names {
		m, ok := f.marks[name]
		if !ok || err == nil && m.state == states[name] {
			continue
		}
		if err == nil {
			m.state = states[name]
		}
		changed = append(changed, name)
	}
	f.mu.Unlock()
	for _, name := range changed {
		f.watchers.Notify(name)
	}
}

// close stops the feed and wakes every watcher; later watches are closed at once.
// Later calls do nothing.
func (f *instanceFeed) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	stop, done := f.stop, f.done
	f.mu.Unlock()
	f.watchers.Close()
	if stop != nil {
		close(stop)
		<-done
	}
}
