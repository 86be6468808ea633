package postgres_test

import (
	"testing"

	"github.com/duroq/duroq/internal/mqtest"
)

func TestConcurrentEnqueuesShareCommits(t *testing.T) {
	q, _, _ := openSchema(t)
	mqtest.ConcurrentEnqueuesShareCommits(t, q, q.EnqueueRounds)
}
