package sqliteconn

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriterCheckpointsInTheBackground makes commits through a Writer, fewer than
// SQLite's own checkpoint waits for, and checks that their pages reach the
// database file soon after: a checkpoint ran beside them.
func TestWriterCheckpointsInTheBackground(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := open(t, path)
	write(t, db, "CREATE TABLE t (x INTEGER PRIMARY KEY, y BLOB)")
	const commits = 1000 // each appends a frame or two to the WAL
	for range commits {
		write(t, db, "INSERT INTO t (y) VALUES (zeroblob(200))")
	}
	const want = commits * 200 // bytes of rows the file holds once checkpointed
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after %d commits of 200-byte rows the database file holds %d bytes: nothing checkpointed the WAL", commits, fi.Size())
		}
	}
}
