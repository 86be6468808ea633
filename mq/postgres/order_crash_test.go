package postgres_test

import (
	"context"
	"os"
	"testing"

	"github.com/duroq/duroq/internal/mqtest"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/duroq/duroq/pgdb"
)

// orderCrashSchema passes the schema to the child of TestKilledHolderKeepsKeyOrder.
const orderCrashSchema = "DUROQ_MQ_ORDER_CRASH_SCHEMA"

// TestKilledHolderKeepsKeyOrder: see mqtest.KilledHolderKeepsKeyOrder.
func TestKilledHolderKeepsKeyOrder(t *testing.T) {
	pgtest.DSN(t)
	mqtest.KilledHolderKeepsKeyOrder(t, "TestOrderCrashChild", func(t *testing.T) (mq.MessageQueue, []string) {
		q, _, schema := openSchema(t)
		return q, []string{orderCrashSchema + "=" + schema}
	})
}

// TestOrderCrashChild is the process TestKilledHolderKeepsKeyOrder starts and kills.
func TestOrderCrashChild(t *testing.T) {
	mqtest.OrderCrashChild(t, func() (mq.MessageQueue, error) {
		return postgres.Open(context.Background(), os.Getenv(pgtest.EnvDSN),
			postgres.Options{DB: pgdb.Options{Schema: os.Getenv(orderCrashSchema)}})
	})
}
