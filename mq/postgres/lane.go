package postgres

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
)

// laneLinger is how long the enqueue rounds keep their connection after a round
// (lane.linger): long enough for the next round of a steady stream of enqueues to
// start, short enough that an idle process gives the connection back at once.
const laneLinger = 50 * time.Millisecond

// laneMinPool is the smallest pool (MaxOpenConns) whose connection the enqueue
// rounds keep between rounds: with the queue's LISTEN connection held too, the rest
// of the process keeps at least two.
const laneMinPool = 4

// lane is the connection the enqueue rounds run on. Rounds run one at a time
// (groupcommit), so one connection serves them all; kept from one round to the
// next, it spares each round a wait for a pool connection behind the process's
// other transactions (a runtime's fetches and acks), which under load made a start
// wait 15–18 ms for a statement of 1 ms. It goes back to the pool once no round
// has come for linger, and is never kept from a pool smaller than laneMinPool.
type lane struct {
	db     *sqlx.DB
	linger time.Duration

	mu     sync.Mutex
	conn   *sql.Conn // kept between rounds; nil when none is
	timer  *time.Timer
	closed bool
}

func newLane(db *sqlx.DB) *lane { return &lane{db: db, linger: laneLinger} }

// take returns the kept connection, or one from the pool.
func (l *lane) take(ctx context.Context) (*sql.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	return l.db.Conn(ctx)
}

// give ends a round on c: it keeps c for the next round, or returns it to the pool
// when the round failed (the connection may be broken), the queue is closing, or
// the pool is too small to spare it.
func (l *lane) give(c *sql.Conn, failed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Rounds never overlap (l.conn is nil here), but a connection must never be
	// dropped without going back to the pool.
	if failed || l.closed || l.conn != nil || !l.spare() {
		c.Close()
		return
	}
	l.conn = c
	if l.timer == nil {
		l.timer = time.AfterFunc(l.linger, l.release)
	} else {
		l.timer.Reset(l.linger)
	}
}

// spare reports whether the pool is large enough to keep a connection aside.
func (l *lane) spare() bool {
	max := l.db.Stats().MaxOpenConnections
	return max == 0 || max >= laneMinPool
}

// release returns the kept connection to the pool.
func (l *lane) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
}

// close releases the kept connection for good.
func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.release()
}
