package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/duroq/duroq/internal/mqtest"
)

func TestConcurrentEnqueuesShareCommits(t *testing.T) {
	q := openQueue(t, filepath.Join(t.TempDir(), "queue.db"))
	t.Cleanup(func() { q.Close() })
	mqtest.ConcurrentEnqueuesShareCommits(t, q, q.EnqueueRounds)
}
