package postgres_test

import (
	"testing"

	"github.com/duroq/duroq/internal/mqtest"
	"github.com/duroq/duroq/mq/postgres"
)

func TestConcurrentEnqueuesShareCommits(t *testing.T) {
	q, _, _ := openSchema(t)
	mqtest.ConcurrentEnqueuesShareCommits(t, q, func() int64 { return postgres.EnqueueRounds(q) })
}
