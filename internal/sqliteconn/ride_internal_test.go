package sqliteconn

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

// rideResult is what a RunAlong call returned.
type rideResult struct {
	alone bool
	err   error
}

// TestRunAlongRides holds the writer in a transaction while writes ask to ride
// along, and checks that the transaction commits them with its own (one commit),
// that a failing write rolls back alone and one whose context ended writes
// nothing; then that writes whose carrier fails at COMMIT run again alone, and
// that a write finding the writer free runs alone.
func TestRunAlongRides(t *testing.T) {
	db, ids := parentChild(t)
	w := WriterOf(db)
	ctx := context.Background()
	insertParent := func(id int) func(ctx context.Context, tx Runner) error {
		return func(ctx context.Context, tx Runner) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO parent (id) VALUES (?)", id)
			return err
		}
	}
	// ride starts RunAlong calls and returns once each waits for the writer.
	ride := func(ctxs []context.Context, fns ...func(context.Context, Runner) error) []chan rideResult {
		t.Helper()
		results := make([]chan rideResult, len(fns))
		for i, fn := range fns {
			results[i] = make(chan rideResult, 1)
			go func() {
				alone, err := w.RunAlong(ctxs[i], fn)
				results[i] <- rideResult{alone, err}
			}()
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			w.rides.mu.Lock()
			n := len(w.rides.waiting)
			w.rides.mu.Unlock()
			if n == len(fns) {
				return results
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d RunAlong calls wait for the writer after 10 s", n, len(fns))
			}
			runtime.Gosched()
		}
	}

	// A Run transaction carries them.
	holding, release := make(chan struct{}), make(chan struct{})
	hostDone := make(chan error, 1)
	go func() {
		hostDone <- w.Run(ctx, func(tx *sqlx.Tx) error {
			if _, err := tx.Exec("INSERT INTO parent (id) VALUES (1)"); err != nil {
				return err
			}
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	writes := w.writes.Load()
	ended, end := context.WithCancel(ctx)
	results := ride([]context.Context{ctx, ctx, ended, ctx},
		insertParent(10), insertParent(1), insertParent(11), insertParent(12))
	end()
	close(release)
	if err := <-hostDone; err != nil {
		t.Fatalf("the carrying transaction: %v", err)
	}
	want := []struct {
		name  string
		check func(error) bool
	}{
		{"a write", func(err error) bool { return err == nil }},
		{"a write breaking the carrier's unique key", func(err error) bool {
			return err != nil && strings.Contains(err.Error(), "UNIQUE")
		}},
		{"a write whose context ended", func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"a write after a failed one", func(err error) bool { return err == nil }},
	}
	for i, r := range results {
		got := <-r
		if got.alone || !want[i].check(got.err) {
			t.Errorf("%s riding along returned alone %v, error %v", want[i].name, got.alone, got.err)
		}
	}
	if n := w.writes.Load() - writes; n != 1 {
		t.Errorf("the carrier and its riders committed %d transactions, want 1", n)
	}
	if got := ids(); !slices.Equal(got, []int{1, 10, 12}) {
		t.Errorf("parent ids %v after the carried writes, want [1 10 12]", got)
	}

	// A RunConn transaction whose COMMIT fails (a deferred foreign key) carries
	// writes, which then commit alone.
	holding, release = make(chan struct{}), make(chan struct{})
	go func() {
		hostDone <- w.RunConn(ctx, func(tx *ConnTx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO child (id, parent) VALUES (1, 99)"); err != nil {
				return err
			}
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	results = ride([]context.Context{ctx, ctx}, insertParent(20), insertParent(21))
	close(release)
	if err := <-hostDone; err == nil || !strings.Contains(err.Error(), "commit") {
		t.Fatalf("the carrier breaking a foreign key returned %v, want a commit error", err)
	}
	for i, r := range results {
		if got := <-r; !got.alone || got.err != nil {
			t.Errorf("write %d carried by a transaction that failed returned alone %v, error %v; want a commit of its own", i, got.alone, got.err)
		}
	}

	// With the writer free, a write runs alone at once.
	if alone, err := w.RunAlong(ctx, insertParent(30)); !alone || err != nil {
		t.Errorf("RunAlong with the writer free returned alone %v, error %v", alone, err)
	}
	if got := ids(); !slices.Equal(got, []int{1, 10, 12, 20, 21, 30}) {
		t.Errorf("parent ids %v, want [1 10 12 20 21 30]", got)
	}
}
