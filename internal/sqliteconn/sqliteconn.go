// Package sqliteconn opens SQLite databases with the settings duroq's SQLite backends
// are designed and tested for.
//
// Statements are prepared once (see internal/stmtcache), but SQLite recompiles a
// prepared statement at its next run when its plan looked at the value of a
// parameter: a LIMIT ?, an equality it may filter with (col = ? where the plan
// could read another index), a value a partial index's condition is compared
// with. go-sqlite3 clears the bindings after each run, which counts as such a
// change, so those statements were compiled at every run, and compiling costs more
// than running a short statement. The backends therefore write the parameters of
// their hot statements' WHERE, ON and LIMIT clauses as +?: unary plus changes no
// value, and the planner does not look through it. The plans stay the same (the
// plan tests check them); CountCompiles lets tests prove that nothing is compiled
// again.
package sqliteconn

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/mattn/go-sqlite3" // also registers the "sqlite3" driver

	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/txn"
)

var memorySeq atomic.Int64

// DriverName is the database/sql driver Open uses: go-sqlite3 with every connection
// keeping temporary tables in memory. Set-based statements (UPDATE … FROM,
// RETURNING) build small ephemeral tables, which would otherwise be temporary files:
// a file per statement made them several times slower.
const DriverName = "duroq-sqlite3"

var sqliteDriver = &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
	_, err := c.Exec(fmt.Sprintf("PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = %d", autoCheckpointFrames), nil)
	return err
}}

// SQLite checkpoints the WAL (copies its pages back into the database file) in the
// commit that makes it longer than wal_autocheckpoint frames, 1,000 by default: one
// commit in a few hundred waited milliseconds for it, holding the process's
// Writer, so every other writer waited too. Instead a Writer has the WAL
// checkpointed in the background, on another connection, checkpointDelay after a
// commit (see Writer.checkpoint): the commits of the delay share the checkpoint,
// which copies each page they changed once. SQLite starts the WAL over only when a
// write transaction begins with every frame copied, which commits that follow each
// other closely never see; so its own checkpoint stays on at autoCheckpointFrames
// (16 MiB of 4 KiB pages): it then copies only the frames committed since the last
// background checkpoint, and the WAL starts over.
const (
	autoCheckpointFrames = 4000
	checkpointDelay      = 10 * time.Millisecond
)

func init() {
	sql.Register(DriverName, sqliteDriver)
	sqlx.BindDriver(DriverName, sqlx.QUESTION)
}

// Open opens (creating if needed) the SQLite database at path in WAL mode, with
// transactions that take the write lock when they begin (BEGIN IMMEDIATE), so that
// two writers never deadlock upgrading a read lock. The path ":memory:" opens a
// private in-memory database shared by the pool's connections. The settings are
// sqlitedb.Options' with its defaults applied: synchronous is NORMAL, FULL, EXTRA or
// OFF.
//
// Closing the returned database returns once every connection is closed (see
// connector.Close): when no other process has the file open, SQLite has then
// checkpointed the WAL and removed the -wal and -shm files, so the file alone holds
// every commit.
func Open(path, sync string, busy time.Duration, conns int) (*sqlx.DB, error) {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busy.Milliseconds()))
	q.Set("_synchronous", sync)
	q.Set("_txlock", "immediate")
	q.Set("_foreign_keys", "1")
	var dsn string
	if path == ":memory:" {
		q.Set("mode", "memory")
		q.Set("cache", "shared")
		dsn = fmt.Sprintf("file:duroq-mem-%d?%s", memorySeq.Add(1), q.Encode())
	} else {
		q.Set("_journal_mode", "WAL")
		dsn = "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	}
	c := &connector{path: path, dsn: dsn, wait: busy}
	db := sqlx.NewDb(sql.OpenDB(c), DriverName)
	c.db = db
	if path == ":memory:" {
		// A shared-cache memory database lives while a connection to it is open, and
		// the pool discards connections (a cancelled transaction does): keep one open
		// outside the pool for as long as db is reachable.
		keeper, err := (&sqlite3.SQLiteDriver{}).Open(dsn)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		runtime.AddCleanup(db, func(c driver.Conn) { c.Close() }, keeper)
		// No other process can share it; and the watcher's reads would meet the
		// shared cache's table locks, which ignore the busy timeout.
		watchers.Store(db, &Watcher{off: true})
	} else {
		writers.Store(db, &Writer{db: db, connect: c.Connect})
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxIdleTime(0)
	if err := ping(db, busy); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// ping opens the first connection. Switching a new file to WAL needs an exclusive
// lock, and SQLite reports SQLITE_BUSY at once, without its busy handler, when
// another process's connection is doing the same: retry until the busy timeout.
func ping(db *sqlx.DB, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	for {
		err := db.Ping()
		if se, ok := errors.AsType[sqlite3.Error](err); !ok || se.Code != sqlite3.ErrBusy || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// connector opens the connections of a database Open returned, and ends its Close.
type connector struct {
	path, dsn string
	db        *sqlx.DB
	wait      time.Duration // bound of Close's wait for connections in use: the busy timeout
}

func (c *connector) Connect(context.Context) (driver.Conn, error) {
	conn, err := sqliteDriver.Open(c.dsn)
	if n, ok := compiles.Load(c.path); ok && err == nil {
		conn.(*sqlite3.SQLiteConn).RegisterAuthorizer(func(action int, _, _, _ string) int {
			switch action {
			case sqlite3.SQLITE_READ, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE:
				n.(*atomic.Int64).Add(1)
			}
			return sqlite3.SQLITE_OK
		})
	}
	return conn, err
}

var compiles sync.Map // path → *atomic.Int64, see CountCompiles

// CountCompiles makes the connections Open opens from now on to the database at
// path count what SQLite compiles, and returns the count so far. SQLite calls the
// authorizer only while it compiles a statement, for each column and table the
// statement reads or writes: a prepared statement run again adds nothing, one
// SQLite recompiles at every run adds at each run (see the package doc). Tests use
// it to prove that hot statements are compiled once.
func CountCompiles(path string) (count func() int64) {
	n, _ := compiles.LoadOrStore(path, new(atomic.Int64))
	return n.(*atomic.Int64).Load
}

func (c *connector) Driver() driver.Driver { return sqliteDriver }

// Close runs at the end of DB.Close, which closes only the idle connections: the
// writer's connection and those of operations in progress would close later (up to
// writerIdle later for the writer's), leaving the database open after Close
// returned. Close hands the writer's connection back once its transaction in
// progress ends, and waits for the others to be released (database/sql closes them
// then), up to the busy timeout, which bounds a statement's wait for the database.
func (c *connector) Close() error {
	if w, ok := watchers.LoadAndDelete(c.db); ok {
		w.(*Watcher).halt()
	}
	if w, ok := writers.LoadAndDelete(c.db); ok {
		w.(*Writer).stopCheckpoints()
		w.(*Writer).release()
	}
	deadline := time.Now().Add(c.wait)
	for {
		n := c.db.Stats().OpenConnections
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sqlite: close %s: %d connections still in use after %v", c.path, n, c.wait)
		}
		// database/sql offers no notification when a connection closes.
		time.Sleep(time.Millisecond)
	}
}

var writers sync.Map // *sqlx.DB → *Writer

// WriterOf returns the writer of db: the duroq packages run their write transactions
// on db through it.
func WriterOf(db *sqlx.DB) *Writer {
	w, _ := writers.LoadOrStore(db, &Writer{db: db})
	return w.(*Writer)
}

// writerIdle is how long the writer keeps its connection after its last
// transaction before handing it back to the pool.
const writerIdle = time.Second

// Writer serialises a process's write transactions on one database and runs them on
// one connection. SQLite admits one writer at a time anyway; queueing writers on a Go
// mutex instead of SQLite's sleeping busy handler keeps latency low under contention
// (transactions of other processes still meet the busy timeout). One connection
// keeps its page cache: in WAL mode a connection drops its whole cache whenever
// another connection has written, so writes rotating over the pool would start
// cold every time.
type Writer struct {
	mu    turns
	rides rides // writes waiting to ride along in the next transaction (RunAlong)
	db    *sqlx.DB
	conn  *sqlx.Conn
	stmts map[string]*sqlx.Stmt // prepared on conn by ConnTx.Prepared
	idle  *time.Timer           // releases the connection writerIdle after the last transaction
	// writes counts the transactions it committed and the checkpoints it ran,
	// for a Watcher to tell this process's writes to the files from others'.
	writes atomic.Uint64
	// connect opens the connection background checkpoints run on (see checkpoint):
	// nil for an in-memory database, which has no WAL, and for a database Open did
	// not open, whose connections checkpoint as SQLite does by default.
	connect       func(context.Context) (driver.Conn, error)
	checkpointing atomic.Bool // a background checkpoint is scheduled
	ckpt          struct {
		sync.Mutex
		conn   driver.Conn // outside the pool, whose connections it would take
		closed bool
	}
}

// Run runs fn in a write transaction on the writer's connection (see sqltx.Run).
// The transaction also carries the writes waiting to ride along (see RunAlong).
func (w *Writer) Run(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	return w.exclusive(ctx, func(bg context.Context) error {
		return sqltx.RunWith(bg, w.begin, func(tx *sqlx.Tx) error {
			if err := fn(tx); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			return w.carry(bg, tx)
		})
	})
}

// ConnTx is a write transaction that RunConn runs on the writer's connection.
type ConnTx struct {
	*sqlx.Conn
	w *Writer
}

// maxConnStatements bounds the statements prepared on the writer's connection;
// past it, statements run as text.
const maxConnStatements = 512

// Prepared returns query prepared on the transaction's connection, where it stays
// prepared while the writer keeps the connection; nil past maxConnStatements.
// It implements stmtcache.Preparer. Like every method of t, call it only inside
// the function RunConn runs, which holds the writer.
func (t *ConnTx) Prepared(ctx context.Context, query string) (*sqlx.Stmt, error) {
	w := t.w
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	if len(w.stmts) >= maxConnStatements {
		return nil, nil
	}
	st, err := t.PreparexContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if w.stmts == nil {
		w.stmts = map[string]*sqlx.Stmt{}
	}
	w.stmts[query] = st
	return st, nil
}

// RunConn is Run with the transaction begun and ended by statements on the
// writer's connection, which fn's statements run on too (through stmtcache they
// run to completion, see stmtcache.Preparer). A transaction of database/sql
// starts a goroutine watching its context, and one for each query result read in
// it, and ends them at commit: for a transaction of one or two short statements,
// those goroutines' wake-ups on other threads cost a fifth of its time.
func (w *Writer) RunConn(ctx context.Context, fn func(tx *ConnTx) error) error {
	return w.exclusive(ctx, w.connTx(ctx, fn))
}

// connTx returns the transaction RunConn runs: fn's statements between BEGIN and
// COMMIT on the writer's connection, for exclusive or hold to run.
func (w *Writer) connTx(ctx context.Context, fn func(tx *ConnTx) error) func(bg context.Context) error {
	return func(bg context.Context) (err error) {
		if err := w.beginStatement(bg); err != nil {
			return fmt.Errorf("begin transaction: %w", err)
		}
		defer func() {
			if p := recover(); p != nil {
				w.settle()
				panic(p)
			}
		}()
		tx := &ConnTx{Conn: w.conn, w: w}
		if err := fn(tx); err != nil {
			return err // exclusive rolls it back
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := w.carry(bg, tx); err != nil {
			return err
		}
		if _, err := w.conn.ExecContext(bg, "COMMIT"); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	}
}

// beginStatement begins a write transaction on the writer's connection with a
// statement (see onConn).
func (w *Writer) beginStatement(ctx context.Context) error {
	_, err := onConn(ctx, w, func(c *sqlx.Conn) (sql.Result, error) { return c.ExecContext(ctx, "BEGIN IMMEDIATE") })
	return err
}

// exclusive runs the transaction tx on the writer's connection, holding the
// writer, with ctx's cancellation removed: database/sql would roll back a
// cancelled transaction asynchronously, after the connection is already the next
// writer's. Run's statements still stop on ctx (RunConn's run to completion), and
// a transaction whose ctx ended rolls back here, before the writer is released.
func (w *Writer) exclusive(ctx context.Context, tx func(bg context.Context) error) error {
	if err := ended(ctx); err != nil {
		return err
	}
	w.mu.lock(false)
	return w.hold(ctx, tx)
}

// ended is the error of a transaction asked to begin once ctx has ended, nil while
// it has not. database/sql closes a connection whose transaction begins with a done
// context: a transaction checks first, to keep the writer's.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	return nil
}

// hold is exclusive once the caller holds the writer, which it releases.
func (w *Writer) hold(ctx context.Context, tx func(bg context.Context) error) error {
	defer w.mu.unlock()
	committed := false
	defer func() { w.rides.settle(committed) }() // before the unlock, even on a panic
	err := tx(context.WithoutCancel(ctx))
	committed = err == nil
	if err == nil {
		w.writes.Add(1)
		if w.connect != nil && w.checkpointing.CompareAndSwap(false, true) {
			time.AfterFunc(checkpointDelay, w.checkpoint)
		}
	}
	if badConn(err) {
		w.drop()
	} else if err != nil && w.conn != nil {
		w.settle()
	}
	// Hand the connection back once idle, so that closing a database that Open did
	// not return (its Close does not release the writer) closes it soon.
	switch {
	case w.conn == nil: // nothing to hand back: dropped, or the database is closed
	case w.idle == nil:
		w.idle = time.AfterFunc(writerIdle, func() {
			w.mu.lock(false)
			defer w.mu.unlock()
			w.drop()
		})
	default:
		w.idle.Reset(writerIdle)
	}
	return err
}

// checkpoint copies the WAL's pages into the database file, on a connection of its
// own, without waiting for anyone (PASSIVE: it stops at frames a reader still
// needs; the next one copies them). A failure (a busy or closed file) leaves the
// frames to the next checkpoint, or to SQLite's own.
func (w *Writer) checkpoint() {
	w.checkpointing.Store(false) // the commits from now on schedule the next one
	w.ckpt.Lock()
	defer w.ckpt.Unlock()
	if w.ckpt.closed {
		return
	}
	if w.ckpt.conn == nil {
		conn, err := w.connect(context.Background())
		if err != nil {
			return
		}
		w.ckpt.conn = conn
	}
	w.writes.Add(1) // its writes to the files are this process's, before and after
	if _, err := w.ckpt.conn.(*sqlite3.SQLiteConn).Exec("PRAGMA wal_checkpoint(PASSIVE)", nil); err != nil {
		w.ckpt.conn.Close()
		w.ckpt.conn = nil
	}
	w.writes.Add(1)
}

// stopCheckpoints closes the checkpoints' connection, after the one in progress;
// none runs after.
func (w *Writer) stopCheckpoints() {
	w.ckpt.Lock()
	defer w.ckpt.Unlock()
	w.ckpt.closed = true
	if w.ckpt.conn != nil {
		w.ckpt.conn.Close()
		w.ckpt.conn = nil
	}
}

// release hands the writer's connection back to the pool after the transaction in
// progress, if any.
func (w *Writer) release() {
	w.mu.lock(false)
	defer w.mu.unlock()
	if w.idle != nil {
		w.idle.Stop()
	}
	w.drop()
}

// begin begins a transaction on the writer's connection (see onConn).
func (w *Writer) begin(ctx context.Context) (*sqlx.Tx, error) {
	return onConn(ctx, w, func(c *sqlx.Conn) (*sqlx.Tx, error) { return c.BeginTxx(ctx, nil) })
}

// onConn begins a transaction with begin on the writer's connection, replacing a
// connection that has gone bad (a transaction ended by its context discards it).
func onConn[T any](ctx context.Context, w *Writer, begin func(c *sqlx.Conn) (T, error)) (T, error) {
	if w.conn != nil {
		v, err := begin(w.conn)
		if !badConn(err) {
			return v, err
		}
		w.drop()
	}
	conn, err := w.db.Connx(ctx)
	if err != nil {
		var none T
		return none, err
	}
	w.conn = conn
	return begin(conn)
}

// settle rolls back a transaction a failed attempt left open on the connection (a
// COMMIT or ROLLBACK that itself failed), so the next writer can begin.
func (w *Writer) settle() {
	err := w.conn.Raw(func(dc any) error {
		if c, ok := dc.(*sqlite3.SQLiteConn); ok && !c.AutoCommit() {
			if _, err := c.Exec("ROLLBACK", nil); err != nil {
				return driver.ErrBadConn // database/sql then closes it, not pools it
			}
		}
		return nil
	})
	if err != nil {
		w.drop()
	}
}

// drop closes the statements prepared on the writer's connection and hands the
// connection back to the pool.
func (w *Writer) drop() {
	for _, st := range w.stmts {
		_ = st.Close()
	}
	w.stmts = nil
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

func badConn(err error) bool {
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone)
}

// Database returns db as a txn.Database: its write transactions run on db's Writer.
// Every call with the same db returns an equal value, so the backends on one SQLite
// database compose.
func Database(db *sqlx.DB) txn.Database { return database{db} }

type database struct{ db *sqlx.DB }

// Run implements txn.Database. SQLite has one writer, so transactions do not
// conflict: fn runs once.
func (d database) Run(ctx context.Context, fn func(ctx context.Context, tx txn.Tx) error) error {
	return sqltx.Share(ctx, d.db, func(run func(*sqlx.Tx) error) error { return WriterOf(d.db).Run(ctx, run) }, fn)
}
