package mq

import (
	"context"
	"encoding/json"
	"fmt"
)

// Codec turns values of T into payloads and back.
type Codec[T any] interface {
	// Encode returns the payload that carries v.
	Encode(v T) ([]byte, error)
	// Decode returns the value a payload made by Encode carries.
	Decode(b []byte) (T, error)
}

// JSON is a Codec that uses encoding/json.
type JSON[T any] struct{}

// Encode implements Codec.
func (JSON[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

// Decode implements Codec.
func (JSON[T]) Decode(b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

// Typed is a MessageQueue seen through a Codec: values of T in, values of T out. The
// queue itself keeps storing opaque bytes.
type Typed[T any] struct {
	Queue MessageQueue // the queue the values go through
	Codec Codec[T]     // encodes and decodes the values; required (NewTyped defaults it to JSON)
}

// NewTyped returns q seen through codec (nil: JSON).
func NewTyped[T any](q MessageQueue, codec Codec[T]) Typed[T] {
	if codec == nil {
		codec = JSON[T]{}
	}
	return Typed[T]{Queue: q, Codec: codec}
}

// Enqueue encodes v into m's payload and enqueues m.
func (t Typed[T]) Enqueue(ctx context.Context, m Message, v T) error {
	b, err := t.Codec.Encode(v)
	if err != nil {
		return fmt.Errorf("mq: enqueue to %q: encode payload: %w", m.Queue, err)
	}
	m.Payload = b
	return t.Queue.Enqueue(ctx, m)
}

// Values decodes the payloads of b in order.
func (t Typed[T]) Values(b *Batch) ([]T, error) {
	out := make([]T, 0, len(b.Messages))
	for _, d := range b.Messages {
		v, err := t.Codec.Decode(d.Payload)
		if err != nil {
			return nil, fmt.Errorf("mq: decode message %d of queue %q: %w", d.ID, b.Queue, err)
		}
		out = append(out, v)
	}
	return out, nil
}
