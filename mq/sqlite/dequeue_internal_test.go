package sqlite

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// TestDequeueBatchesTakeEachKeysOldestEligibleMessages checks the two ways a keyed
// batch is locked — from the candidate scan's rows when they are all the key's
// visible messages, by lockKeysSQL otherwise (payloads the scan leaves out, delayed
// or differently tagged messages, bounds) — against a model: each key's eligible
// messages in id order while they fit the bounds, the first always.
func TestDequeueBatchesTakeEachKeysOldestEligibleMessages(t *testing.T) {
	type msg struct {
		mq.Message
		delayed bool
	}
	rng := rand.New(rand.NewPCG(13, 1))
	// Two keys whose batches fill a byte bound exactly (300, and 2048 with a payload
	// the scan leaves out).
	var msgs []msg
	for _, m := range []struct {
		key  string
		size int
	}{{"exact", 100}, {"exact", 200}, {"exact", 1}, {"exact-big", scanPayload + 1}, {"exact-big", scanPayload - 1}, {"exact-big", 1}} {
		msgs = append(msgs, msg{Message: mq.Message{Queue: "q", RoutingKey: m.key, Payload: make([]byte, m.size)}})
	}
	for i := range 400 {
		m := msg{Message: mq.Message{Queue: "q", RoutingKey: fmt.Sprint("k", rng.IntN(60))}}
		switch rng.IntN(10) {
		case 0:
			m.RoutingKey = "" // un-keyed
		case 1:
			m.delayed = true
			m.Delay = time.Hour
		case 2:
			m.Tag = "other"
		}
		size := rng.IntN(200)
		if rng.IntN(8) == 0 {
			size = scanPayload + rng.IntN(2*scanPayload) // left out by the scan
		}
		m.Payload = bytes.Repeat([]byte{byte(i)}, size)
		msgs = append(msgs, m)
	}
	for _, bounds := range []struct{ messages, bytes int }{{-1, -1}, {1, -1}, {3, -1}, {-1, 300}, {-1, 2 * scanPayload}} {
		t.Run(fmt.Sprintf("MaxMessages=%d,MaxBytes=%d", bounds.messages, bounds.bytes), func(t *testing.T) {
			q, err := Open(filepath.Join(t.TempDir(), "q.db"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			for _, m := range msgs {
				if err := q.Enqueue(t.Context(), m.Message); err != nil { // one by one: ids in slice order
					t.Fatal(err)
				}
			}
			opts := mq.DequeueOptions{Tags: mq.DefaultOnly(), MaxMessages: bounds.messages, MaxBytes: bounds.bytes}
			batches, err := q.DequeueBatches(t.Context(), "q", opts, 1000)
			if err != nil {
				t.Fatal(err)
			}
			norm, err := mq.NormalizeDequeue("q", opts)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][][]byte{} // key → payloads of its batch ("" holds the un-keyed ones)
			size := map[string]int{}
			for _, m := range msgs {
				if m.delayed || m.Tag != "" {
					continue
				}
				k, got := m.RoutingKey, want[m.RoutingKey]
				if k != "" && len(got) > 0 && (len(got) >= norm.MaxMessages || size[k]+len(m.Payload) > norm.MaxBytes) {
					size[k] = norm.MaxBytes + 1 // the batch ended: no later message joins
					continue
				}
				want[k] = append(got, m.Payload)
				size[k] += len(m.Payload)
			}
			got := map[string][][]byte{}
			for _, b := range batches {
				if b.RoutingKey != "" && got[b.RoutingKey] != nil {
					t.Fatalf("key %s in two batches", b.RoutingKey)
				}
				for _, d := range b.Messages {
					got[b.RoutingKey] = append(got[b.RoutingKey], d.Payload)
				}
			}
			if len(got) != len(want) {
				t.Errorf("batches of %d keys (un-keyed counting as one), want %d", len(got), len(want))
			}
			for k, w := range want {
				if !slices.EqualFunc(got[k], w, bytes.Equal) {
					t.Errorf("key %q: got %d messages %v, want %d %v", k, len(got[k]), sizes(got[k]), len(w), sizes(w))
				}
			}
		})
	}
}

func sizes(payloads [][]byte) []int {
	out := make([]int, len(payloads))
	for i, p := range payloads {
		out[i] = len(p)
	}
	return out
}
