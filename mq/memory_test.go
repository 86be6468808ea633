package mq_test

import (
	"testing"
	"time"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/mq"
)

func TestMemoryConformance(t *testing.T) {
	conformance.TestMessageQueue(t, conformance.QueueFactory{
		New: func(t *testing.T, now func() time.Time) mq.MessageQueue {
			return mq.NewMemory(mq.MemoryOptions{Now: now})
		},
	})
}

func BenchmarkQueue(b *testing.B) {
	bench.MessageQueue(b, func(b *testing.B) mq.MessageQueue { return mq.NewMemory(mq.MemoryOptions{}) })
}
