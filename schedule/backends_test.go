package schedule_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/duroq/duroq/mq/sqlite"
	"github.com/duroq/duroq/pgdb"
)

// backend opens queues on one storage: each call of the function newStorage
// returns opens a new handle on the same storage, as another process would (the
// memory backend, which no other process can share, returns its one queue).
type backend struct {
	name       string
	newStorage func(t *testing.T, now func() time.Time) func() mq.MessageQueue
}

var backends = []backend{
	{"memory", func(t *testing.T, now func() time.Time) func() mq.MessageQueue {
		q := mq.NewMemory(mq.MemoryOptions{Now: now})
		t.Cleanup(func() { q.Close() })
		return func() mq.MessageQueue { return q }
	}},
	{"sqlite", func(t *testing.T, now func() time.Time) func() mq.MessageQueue {
		path := filepath.Join(t.TempDir(), "schedules.db")
		return func() mq.MessageQueue {
			q, err := sqlite.Open(path, sqlite.Options{Now: now})
			if err != nil {
				t.Fatalf("sqlite.Open: %v", err)
			}
			t.Cleanup(func() { q.Close() })
			return q
		}
	}},
	// Skipped, saying so, unless DUROQ_POSTGRES_DSN names a server.
	{"postgres", func(t *testing.T, now func() time.Time) func() mq.MessageQueue {
		dsn, schema := pgtest.Schema(t)
		return func() mq.MessageQueue {
			q, err := postgres.Open(context.Background(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema}, Now: now})
			if err != nil {
				t.Fatalf("postgres.Open: %v", err)
			}
			t.Cleanup(func() { q.Close() })
			return q
		}
	}},
}

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
