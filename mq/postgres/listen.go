package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// The listener: one goroutine per Queue holding one connection of the pool, which
// LISTENs on the schema's channels and turns every notification into a wake-up of
// this process's long polls on the queue it names, or of the watchers of the signal
// it carries (see Watch). It starts with the first long poll or watch and
// reconnects with a growing backoff when its connection fails; meanwhile long polls
// still end at their deadline or at the next time a message is due. Every
// (re)connection wakes all long polls and watchers once, since notifications sent
// while nobody listened are lost.

const (
	listenMinBackoff = 100 * time.Millisecond
	listenMaxBackoff = 5 * time.Second
)

// errNotPgx: the database does not use pgx's driver, so it cannot LISTEN.
var errNotPgx = errors.New("the database does not use the pgx driver (github.com/jackc/pgx/v5/stdlib); long polls are woken only by this process and by their deadlines")

// startListening starts the listener if it is not running.
func (q *Queue) startListening() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.listenerDone != nil || q.closed.Load() {
		return
	}
	if q.db.Stats().MaxOpenConnections == 1 {
		// The listener would hold the pool's only connection and starve every call.
		q.log.Warn("mq/postgres: a pool of one connection cannot LISTEN; long polls are woken only by this process and by their deadlines")
		q.deaf.Store(true)
		q.listenerDone = make(chan struct{})
		close(q.listenerDone)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	q.stopListener, q.listenerDone = cancel, make(chan struct{})
	go q.listen(ctx, q.listenerDone)
}

// stopListening stops the listener, if it runs, and waits for it to end.
func (q *Queue) stopListening() {
	q.mu.Lock()
	stop, done := q.stopListener, q.listenerDone
	q.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func (q *Queue) listen(ctx context.Context, done chan struct{}) {
	defer close(done)
	backoff := listenMinBackoff
	for {
		listened, err := q.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotPgx) {
			q.log.Warn("mq/postgres: cannot LISTEN", "err", err)
			q.deaf.Store(true)
			return
		}
		if listened {
			backoff = listenMinBackoff
		}
		q.log.Warn("mq/postgres: the LISTEN connection failed; long polls fall back to their deadlines until it is back",
			"err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenMaxBackoff)
	}
}

// listenOnce takes a connection from the pool, LISTENs on it and relays notifications
// until the connection fails or ctx ends. The connection is then discarded, never
// returned to the pool with a LISTEN on it. listened reports that LISTEN succeeded.
func (q *Queue) listenOnce(ctx context.Context) (listened bool, err error) {
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	rawErr := conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			err = errNotPgx
			return nil
		}
		pc := sc.Conn()
		var channel, signals string
		if err = pc.QueryRow(ctx, `SELECT `+channelExpr+`, `+signalChannelExpr).Scan(&channel, &signals); err != nil {
			return driver.ErrBadConn
		}
		for _, c := range []string{signals, channel} { // the queues' last: pg_stat_activity shows it
			if _, err = pc.Exec(ctx, "LISTEN "+pgx.Identifier{c}.Sanitize()); err != nil {
				return driver.ErrBadConn
			}
		}
		listened = true
		q.hub.NotifyAll()
		q.watchers.NotifyAll()
		for {
			n, werr := pc.WaitForNotification(ctx)
			if werr != nil {
				err = werr
				return driver.ErrBadConn
			}
			if n.Channel == signals {
				q.watchers.Notify(n.Payload)
			} else {
				q.hub.Notify(n.Payload)
			}
		}
	})
	if err == nil {
		err = rawErr
	}
	return listened, err
}
