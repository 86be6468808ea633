package sqliteconn

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duroq/duroq/internal/stmtcache"
	"github.com/jmoiron/sqlx"
)

// TestRunConnCommitsOrRollsBack runs transactions through Writer.RunConn that
// commit, fail, panic, are cancelled and fail at COMMIT, and checks what each left
// in the table and that the next transaction runs on a usable connection with the
// statements it prepared.
func TestRunConnCommitsOrRollsBack(t *testing.T) {
	db, ids := parentChild(t)
	w := WriterOf(db)
	ctx := context.Background()
	const insert = "INSERT INTO parent (id) VALUES (?)"
	insertParent := func(ctx context.Context, tx *ConnTx, id int) error {
		st, err := tx.Prepared(ctx, insert)
		if err != nil {
			return err
		}
		_, err = st.ExecContext(ctx, id)
		return err
	}

	if err := w.RunConn(ctx, func(tx *ConnTx) error { return insertParent(ctx, tx, 1) }); err != nil {
		t.Fatal(err)
	}
	failure := errors.New("handler failed")
	if err := w.RunConn(ctx, func(tx *ConnTx) error {
		if err := insertParent(ctx, tx, 2); err != nil {
			return err
		}
		return failure
	}); !errors.Is(err, failure) {
		t.Fatalf("RunConn whose function failed returned %v, want its error", err)
	}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the function's panic", p)
			}
		}()
		_ = w.RunConn(ctx, func(tx *ConnTx) error {
			if err := insertParent(ctx, tx, 3); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	cancelled, cancel := context.WithCancel(ctx)
	if err := w.RunConn(cancelled, func(tx *ConnTx) error {
		err := insertParent(cancelled, tx, 4)
		cancel()
		return err
	}); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunConn cancelled during its function returned %v, want context.Canceled", err)
	}
	// Statements through the cache run to completion, but none starts once the
	// context has ended.
	cache := stmtcache.New(db)
	defer cache.Close()
	running, stop := context.WithCancel(ctx)
	if err := w.RunConn(running, func(tx *ConnTx) error {
		if _, err := cache.Exec(running, tx, insert, 8); err != nil {
			t.Errorf("a statement through the cache before cancellation: %v", err)
		}
		stop()
		_, err := cache.Exec(running, tx, insert, 9)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a statement through the cache after cancellation returned %v, want context.Canceled", err)
		}
		return err
	}); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunConn cancelled between statements returned %v, want context.Canceled", err)
	}
	// A deferred foreign key fails the COMMIT, which leaves the transaction open:
	// RunConn must roll it back before the next one begins.
	if err := w.RunConn(ctx, func(tx *ConnTx) error {
		if err := insertParent(ctx, tx, 5); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO child (id, parent) VALUES (1, 99)")
		return err
	}); err == nil || !strings.Contains(err.Error(), "commit") {
		t.Fatalf("RunConn whose COMMIT breaks a foreign key returned %v, want a commit error", err)
	}
	if got := ids(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("parent ids %v after a commit and five failed transactions, want [1]", got)
	}

	if err := w.RunConn(ctx, func(tx *ConnTx) error { return insertParent(ctx, tx, 6) }); err != nil {
		t.Fatal(err)
	}
	if len(w.stmts) != 1 {
		t.Fatalf("the writer's connection holds %d prepared statements after seven transactions running it, want 1", len(w.stmts))
	}
	w.release() // as when the writer is idle: the statements go with the connection
	if w.stmts != nil {
		t.Fatalf("the writer released its connection and kept %d statements prepared on it", len(w.stmts))
	}
	if err := w.RunConn(ctx, func(tx *ConnTx) error { return insertParent(ctx, tx, 7) }); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 3 || got[2] != 7 {
		t.Fatalf("parent ids %v, want [1 6 7]", got)
	}
}

// parentChild opens a database of two tables, parent and child, whose foreign key
// is checked at COMMIT, and returns it with a function listing the parent ids.
func parentChild(t *testing.T) (db *sqlx.DB, ids func() []int) {
	db = open(t, filepath.Join(t.TempDir(), "app.db"))
	write(t, db, "CREATE TABLE parent (id INTEGER PRIMARY KEY)")
	write(t, db, "CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
	return db, func() []int {
		t.Helper()
		var got []int
		if err := db.Select(&got, "SELECT id FROM parent ORDER BY id"); err != nil {
			t.Fatal(err)
		}
		return got
	}
}
