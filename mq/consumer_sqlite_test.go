package mq_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

// The consumer tests also run on SQLite, a durable backend with real transactions.
func init() {
	backends = append(backends, backend{"sqlite", func(t *testing.T, now func() time.Time) mq.MessageQueue {
		q, err := sqlite.Open(filepath.Join(t.TempDir(), "queue.db"), sqlite.Options{Now: now})
		if err != nil {
			t.Fatalf("sqlite.Open: %v", err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}})
}
