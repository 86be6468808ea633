package mq_test

import (
	"context"
	"testing"
	"time"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/duroq/duroq/pgdb"
)

// The consumer tests also run on PostgreSQL (on a schema of their own) when
// DUROQ_POSTGRES_DSN names a server; without it they are skipped, saying so.
func init() {
	backends = append(backends, backend{"postgres", func(t *testing.T, now func() time.Time) mq.MessageQueue {
		dsn, schema := pgtest.Schema(t)
		q, err := postgres.Open(context.Background(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema}, Now: now})
		if err != nil {
			t.Fatalf("postgres.Open: %v", err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}})
}
