package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

func TestQueueDemoKeepsEachCustomersOrderAndRedrives(t *testing.T) {
	var out strings.Builder
	if err := runQueueDemo([]string{"-db", filepath.Join(t.TempDir(), "queue.db")}, &out); err != nil {
		t.Fatalf("queue-demo: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"alice:   placed → paid → packed → shipped\n",
		"bob:     placed → paid (after a retry) → packed → shipped\n",
		"carol:   placed → paid → packed → (shipped: dead-lettered)\n",
		`bob's "paid" failed on its first attempt (payment service timed out) and was retried`,
		`carol's "shipped" failed 3 times and was moved to the dead-letter queue "orders.dead" (from queue "orders", last error: "no delivery address on the event")`,
		`the dead-letter queue was redriven: 1 message back to "orders"`,
		`carol's "shipped" was handled after the redrive`,
		"Each customer's events were handled in order, each exactly once, and the dead-letter queue was redriven and is empty.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("queue-demo output lacks %q:\n%s", want, got)
		}
	}
}

// Messages an earlier run left behind, one of them locked by a consumer that died,
// do not keep the demo from finishing.
func TestQueueDemoPurgesLeftovers(t *testing.T) {
	db := filepath.Join(t.TempDir(), "queue.db")
	q, err := sqlite.Open(db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = q.Enqueue(t.Context(), mq.Message{Queue: demoQueue, RoutingKey: "alice", Payload: []byte(`{"customer":"alice","step":"old"}`)},
		mq.Message{Queue: demoQueue, Payload: []byte("not even JSON")}, mq.Message{Queue: demoDeadLetters, Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := q.DequeueBatch(t.Context(), demoQueue, mq.DequeueOptions{}); err != nil || b == nil {
		t.Fatalf("DequeueBatch: %v, %v", b, err)
	}
	q.Close()

	var out strings.Builder
	if err := runQueueDemo([]string{"-db", db, "-customers", "4", "-events", "3", "-workers", "2"}, &out); err != nil {
		t.Fatalf("queue-demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"(messages left by an earlier run, removed: 3)", "dave:    placed → paid → packed\n",
		"Each customer's events were handled in order"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("queue-demo output lacks %q:\n%s", want, out.String())
		}
	}
}
