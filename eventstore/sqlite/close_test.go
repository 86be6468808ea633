package sqlite_test

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/sqlite"
	"github.com/duroq/duroq/internal/sqliteconn/sqliteconntest"
)

// A store opened by path is closed when Close returns: its WAL is checkpointed into
// the file and the side files are gone, so a copy of the file alone holds every
// event; a second Close is harmless.
func TestCloseLeavesEverythingInTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "es.db")
	s, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Append(t.Context(), "order-42", 1, []eventstore.Event{{Seq: 1, Type: "Started"}, {Seq: 2, Type: "Charged"}}), "append")
	if events, err := s.Read(t.Context(), "order-42", 1); err != nil || len(events) != 2 {
		t.Fatalf("read: %d events, %v", len(events), err)
	}
	must(t, s.Close(), "close")
	if n := closedEvents(t, path, "order-42"); n != 2 {
		t.Fatalf("the copy of the closed file holds %d events, want 2", n)
	}
	must(t, s.Close(), "second close")
}

// Close while writers append returns, every writer ends, and the file is left whole.
func TestCloseDuringOperations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "es.db")
	s, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	started := make(chan struct{}, 3)
	for w := range 3 {
		wg.Go(func() {
			stream := []string{"a", "b", "c"}[w]
			for seq := int64(1); ; seq++ {
				if err := s.Append(t.Context(), stream, 1, []eventstore.Event{{Seq: seq}}); err != nil {
					return
				}
				if _, err := s.Read(t.Context(), stream, 1); err != nil {
					return
				}
				if seq == 1 {
					started <- struct{}{}
				}
			}
		})
	}
	for range 3 {
		<-started
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		must(t, err, "close during operations")
	case <-time.After(30 * time.Second):
		t.Fatal("Close during operations did not return in 30s")
	}
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("operations still running 30s after Close")
	}
	for _, stream := range []string{"a", "b", "c"} {
		if n := closedEvents(t, path, stream); n < 1 {
			t.Fatalf("the copy of the closed file holds no event of stream %s", stream)
		}
	}
}

// closedEvents checks that the store's file at path was closed whole and returns how
// many events of stream's partition 1 a copy of the file alone holds.
func closedEvents(t *testing.T, path, stream string) int {
	t.Helper()
	events, err := sqlite.New(sqliteconntest.ClosedFile(t, path), sqlite.Options{}).Read(t.Context(), stream, 1)
	if err != nil {
		t.Fatalf("read the copy of the closed file: %v", err)
	}
	return len(events)
}
