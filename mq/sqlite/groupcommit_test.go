package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/duroq/duroq/internal/mqtest"
	"github.com/duroq/duroq/mq/sqlite"
)

func TestConcurrentEnqueuesShareCommits(t *testing.T) {
	q := openQueue(t, filepath.Join(t.TempDir(), "queue.db"))
	t.Cleanup(func() { q.Close() })
	mqtest.ConcurrentEnqueuesShareCommits(t, q, func() int64 { return sqlite.EnqueueRounds(q) })
}
