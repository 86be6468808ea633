package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/duroq/duroq/pgdb"
)

// TestSignalReachesAnotherQueuesWatchers: two queues on one schema stand for two
// processes (each its own pool and listener). A watcher of one name is woken by a
// Signal of that name through the other queue, not by another name's, nor by a
// queue's wake-up; names far longer than a NOTIFY payload may be are signalled too.
func TestSignalReachesAnotherQueuesWatchers(t *testing.T) {
	watcher, dsn, schema := openSchema(t)
	signaller := openOn(t, dsn, schema)

	// The listener's (re)connection closes every watch once: signals sent while it
	// was down are lost. Wait for that first.
	first, release := watcher.Watch("instance-1")
	wantClosed(t, first, "the listener's start")
	release()

	long := strings.Repeat("i", 20_000)
	ch, release := watcher.Watch("instance-1")
	defer release()
	chLong, releaseLong := watcher.Watch(long)
	defer releaseLong()
	signaller.Signal("instance-2")
	signaller.Notify("instance-1") // a queue's wake-up, not a signal
	signaller.Signal(long)
	wantClosed(t, chLong, "a Signal of a 20,000-byte name through another queue")
	select {
	case <-ch:
		t.Fatal("a watch of instance-1 woken by a signal of another name or by a queue's wake-up")
	case <-time.After(200 * time.Millisecond):
	}
	signaller.Signal("instance-1")
	wantClosed(t, ch, "a Signal through another queue")

	// This process's own signals wake its watchers at once, before any NOTIFY.
	own, releaseOwn := signaller.Watch("instance-3")
	defer releaseOwn()
	signaller.Signal("instance-3")
	select {
	case <-own:
	default:
		t.Fatal("Signal did not wake this queue's own watcher at once")
	}
}

// TestWatchEndsAtClose: Close wakes every watcher, and a watch taken after Close
// is closed already, so that nobody waits on a closed queue.
func TestWatchEndsAtClose(t *testing.T) {
	q, _, _ := openSchema(t)
	ch, release := q.Watch("x")
	defer release()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, ch, "Close")
	after, releaseAfter := q.Watch("x")
	defer releaseAfter()
	wantClosed(t, after, "Close, taken after it")
}

func wantClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("watch not closed 10 s after %s", what)
	}
}

// TestWatchWithoutListenerIsNil: a pool of one connection cannot LISTEN, so no
// other process's signal could arrive; Watch says so with a nil channel, and the
// runtime's clients read at their usual pace.
func TestWatchWithoutListenerIsNil(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	q := openWith(t, dsn, postgres.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 1}})
	ch, release := q.Watch("x")
	defer release()
	if ch != nil {
		t.Fatal("Watch on a queue that cannot LISTEN returned a channel")
	}
}
