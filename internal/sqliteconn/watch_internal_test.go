package sqliteconn

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/jmoiron/sqlx"
)

// Another connection's commit reaches a watcher's subscribers, with the operating
// system's file notifications and with the polling fallback. The second database
// stands for another process: it has a writer of its own.
func TestWatcherSeesOtherCommits(t *testing.T) {
	for _, c := range []struct {
		name   string
		events func() (*fsnotify.Watcher, error)
	}{
		{"notifications", fsnotify.NewWatcher},
		{"polling", func() (*fsnotify.Watcher, error) { return nil, errors.New("no notifications here") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			newEvents = c.events
			t.Cleanup(func() { newEvents = fsnotify.NewWatcher })
			path := filepath.Join(t.TempDir(), "app.db")
			watched, other := open(t, path), open(t, path)
			write(t, other, "CREATE TABLE t (x INTEGER)")

			changed := make(chan struct{}, 1)
			unsubscribe := WatcherOf(watched).Subscribe(func() {
				select {
				case changed <- struct{}{}:
				default:
				}
			})
			defer unsubscribe()

			began := time.Now()
			write(t, other, "INSERT INTO t VALUES (1)")
			select {
			case <-changed:
				t.Logf("noticed another connection's commit after %v", time.Since(began))
			case <-time.After(5 * time.Second):
				t.Fatal("the watcher did not notice another connection's commit")
			}
		})
	}
}

// A watcher of an in-memory database watches nothing, and closing a database stops
// its watcher (Close returns; the subscription's end does not hang).
func TestWatcherOffAndClose(t *testing.T) {
	mem, err := Open(":memory:", "NORMAL", time.Second, 2)
	if err != nil {
		t.Fatal(err)
	}
	WatcherOf(mem).Subscribe(func() { t.Error("an in-memory database reported a change") })()
	mem.Close()

	db := open(t, filepath.Join(t.TempDir(), "app.db"))
	unsubscribe := WatcherOf(db).Subscribe(func() {})
	if err := db.Close(); err != nil {
		t.Fatalf("Close with a watcher running: %v", err)
	}
	unsubscribe()
}

func open(t *testing.T, path string) *sqlx.DB {
	t.Helper()
	db, err := Open(path, "NORMAL", 10*time.Second, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func write(t *testing.T, db *sqlx.DB, stmt string) {
	t.Helper()
	if err := WriterOf(db).Run(context.Background(), func(tx *sqlx.Tx) error {
		_, err := tx.Exec(stmt)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
