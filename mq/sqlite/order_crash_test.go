package sqlite_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/duroq/duroq/internal/mqtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

// orderCrashDB passes the database file to the child of TestKilledHolderKeepsKeyOrder.
const orderCrashDB = "DUROQ_MQ_ORDER_CRASH_DB"

// TestKilledHolderKeepsKeyOrder: see mqtest.KilledHolderKeepsKeyOrder.
func TestKilledHolderKeepsKeyOrder(t *testing.T) {
	mqtest.KilledHolderKeepsKeyOrder(t, "TestOrderCrashChild", func(t *testing.T) (mq.MessageQueue, []string) {
		path := filepath.Join(t.TempDir(), "order.db")
		q := openQueue(t, path)
		t.Cleanup(func() { q.Close() })
		return q, []string{orderCrashDB + "=" + path}
	})
}

// TestOrderCrashChild is the process TestKilledHolderKeepsKeyOrder starts and kills.
func TestOrderCrashChild(t *testing.T) {
	mqtest.OrderCrashChild(t, func() (mq.MessageQueue, error) {
		return sqlite.Open(os.Getenv(orderCrashDB), sqlite.Options{})
	})
}
