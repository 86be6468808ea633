package mq_test

import (
	"testing"

	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/mq"
)

func TestMemoryConformance(t *testing.T) {
	conformance.TestMessageQueue(t, conformance.QueueFactory{
		New: func(t *testing.T) mq.MessageQueue { return mq.NewMemory(mq.MemoryOptions{}) },
	})
}

func BenchmarkQueue(b *testing.B) {
	bench.MessageQueue(b, func(b *testing.B) mq.MessageQueue { return mq.NewMemory(mq.MemoryOptions{}) })
}
