package conformance

import (
	"fmt"
	"testing"

	"github.com/duroq/duroq/mq"
)

// priorityCases: Message.Priority. Among eligible batches the higher priority comes
// first and equal priorities keep the usual order; a routing key competes with its
// most urgent eligible message but its batch is still its oldest messages in id
// order; the priority travels with the message through every move.
var priorityCases = []mqCase{
	{"HigherPriorityIsDeliveredFirst", testHigherPriorityIsDeliveredFirst},
	{"EqualPrioritiesKeepTheUsualOrder", testEqualPrioritiesKeepTheUsualOrder},
	{"NegativePrioritiesComeAfterTheDefault", testNegativePrioritiesComeAfterTheDefault},
	{"KeyCompetesWithItsMostUrgentMessageButBatchesInIDOrder", testKeyCompetesWithItsMostUrgentMessage},
	{"DelayedUrgentMessageWaitsForItsVisibility", testDelayedUrgentMessageWaitsForItsVisibility},
	{"DequeueBatchesComeInPriorityOrder", testDequeueBatchesComeInPriorityOrder},
	{"SessionMessagesFollowPriority", testSessionMessagesFollowPriority},
	{"PriorityIsKeptThroughAbandonDeadLetterAndRedrive", testPriorityIsKeptThroughMoves},
	{"InvalidPriorityIsRejected", testInvalidPriorityIsRejected},
}

// pmsg is an un-keyed message of qn with priority p.
func pmsg(p int, payload string) mq.Message {
	return mq.Message{Queue: qn, Payload: []byte(payload), Priority: p}
}

// pkmsg is a message of qn with routing key key and priority p.
func pkmsg(key string, p int, payload string) mq.Message {
	return mq.Message{Queue: qn, RoutingKey: key, Payload: []byte(payload), Priority: p}
}

// wantPriority fails unless every message of b reports priority want.
func wantPriority(t *testing.T, b *mq.Batch, want int, rule string) {
	t.Helper()
	for _, d := range b.Messages {
		if d.Priority != want {
			t.Fatalf("%s: message %q of batch %s is delivered with Priority %d, want %d", rule, d.Payload, describe(b), d.Priority, want)
		}
	}
}

func testHigherPriorityIsDeliveredFirst(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, pmsg(0, "low"), pmsg(5, "high"), pmsg(1, "mid"), pmsg(mq.MaxPriority, "top"))
	wantPriority(t, fetchPayloads(t, q, mq.DequeueOptions{}, "the highest priority comes first", "top"), mq.MaxPriority, "Delivery.Priority")
	wantPriority(t, fetchPayloads(t, q, mq.DequeueOptions{}, "then priority 5", "high"), 5, "Delivery.Priority")
	wantPriority(t, fetchPayloads(t, q, mq.DequeueOptions{}, "then priority 1", "mid"), 1, "Delivery.Priority")
	wantPriority(t, fetchPayloads(t, q, mq.DequeueOptions{}, "the default priority comes last", "low"), 0, "Delivery.Priority")
}

func testEqualPrioritiesKeepTheUsualOrder(t *testing.T, e env) {
	q, clk := e.openClock(t)
	// Equal priorities: earliest visibility first, then enqueue order.
	late := pmsg(3, "h-late")
	late.Delay = lt
	put(t, q, late, pmsg(0, "d1"), pmsg(3, "h1"), pmsg(0, "d2"), pmsg(3, "h2"))
	clk.past(mqEpoch.Add(lt))
	put(t, q, pmsg(3, "h3"))
	wantDrained(t, q, "equal priorities keep visibility, then enqueue order", "h1", "h2", "h-late", "h3", "d1", "d2")
}

func testNegativePrioritiesComeAfterTheDefault(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, pmsg(-5, "n5"), pmsg(mq.MinPriority, "bottom"), pmsg(0, "d1"), pmsg(-1, "n1"), pkmsg("A", -3, "a1"), pmsg(0, "d2"), pmsg(2, "p2"))
	wantDrained(t, q, "negative priorities come after the default, lowest last", "p2", "d1", "d2", "n1", "a1", "n5", "bottom")
}

func testKeyCompetesWithItsMostUrgentMessage(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), msg("u1"), kmsg("B", "b1"), kmsg("B", "b2"), pkmsg("B", 5, "b3"), pmsg(3, "u2"), pkmsg("A", 1, "a2"))
	b := fetchPayloads(t, q, mq.DequeueOptions{MaxMessages: 2},
		"key B competes with its priority-5 message, but its bounded batch is its two oldest messages", "b1", "b2")
	if b.RoutingKey != "B" {
		t.Fatalf("the batch of key B reports RoutingKey %q", b.RoutingKey)
	}
	fetchPayloads(t, q, mq.DequeueOptions{}, "with key B held, the priority-3 message is next", "u2")
	fetchPayloads(t, q, mq.DequeueOptions{}, "key A competes with its priority-1 message; its batch is in id order", "a1", "a2")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the default-priority message comes last", "u1")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "b3 waits behind its key's batch")
	ack(t, q, b)
	wantPriority(t, fetchPayloads(t, q, mq.DequeueOptions{}, "the key's next batch starts where the last stopped", "b3"), 5, "Delivery.Priority")
}

func testDelayedUrgentMessageWaitsForItsVisibility(t *testing.T, e env) {
	q, clk := e.openClock(t)
	urgent := pmsg(mq.MaxPriority, "urgent")
	urgent.Delay = lt
	keyed := pkmsg("A", mq.MaxPriority, "a2")
	keyed.Delay = lt
	put(t, q, urgent, kmsg("A", "a1"), keyed, msg("u1"), msg("u2"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "a delayed urgent message does not hold back the visible ones, nor lend its key its priority", "a1")
	ack(t, q, b)
	fetchPayloads(t, q, mq.DequeueOptions{}, "visible messages go in the usual order", "u1")
	clk.past(mqEpoch.Add(lt))
	fetchPayloads(t, q, mq.DequeueOptions{}, "once visible, the urgent message comes first", "urgent")
	fetchPayloads(t, q, mq.DequeueOptions{}, "then the urgent keyed one", "a2")
	fetchPayloads(t, q, mq.DequeueOptions{}, "then the rest", "u2")
}

func testDequeueBatchesComeInPriorityOrder(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"), kmsg("A", "a1"), pmsg(2, "u2"), kmsg("B", "b1"), pkmsg("B", 7, "b2"), pkmsg("A", 1, "a2"), pmsg(-1, "u3"), kmsg("C", "c1"))
	two := fetchBatches(t, q, mq.DequeueOptions{}, 2)
	if got, want := batchPayloads(two), "[b1,b2] [u2]"; got != want {
		t.Fatalf("DequeueBatches(2) = %s; want the two most urgent batches %s", got, want)
	}
	rest := fetchBatches(t, q, mq.DequeueOptions{}, 10)
	if got, want := batchPayloads(rest), "[a1,a2] [u1] [c1] [u3]"; got != want {
		t.Fatalf("DequeueBatches(10) = %s; want the batches in priority order %s", got, want)
	}
}

func testSessionMessagesFollowPriority(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, smsg("s1", "s1a"), msg("u1"), mq.Message{Queue: qn, Session: "s1", Payload: []byte("s1b"), Priority: 4})
	rule := "an owner takes the urgent message of a session nobody holds first"
	wantSession(t, mustFetch(t, q, as(ownerA), rule), "s1", "s1b", rule)
	rule = "then the session's default-priority message"
	wantSession(t, mustFetch(t, q, as(ownerA), rule), "s1", "s1a", rule)
	fetchPayloads(t, q, as(ownerA), "then the un-keyed message", "u1")
}

func testPriorityIsKeptThroughMoves(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	// The dead-letter queue holds an older default-priority message: the dead
	// letter must still come first there.
	put(t, q, mq.Message{Queue: "dlq", Payload: []byte("old")}, msg("plain"), pmsg(7, "x"), pkmsg("K", -2, "k1"))
	x := fetchPayloads(t, q, mq.DequeueOptions{}, "the urgent message comes first", "x")
	wantPriority(t, x, 7, "Delivery.Priority")
	abandon(t, q, x, mq.AbandonOptions{})
	x = fetchPayloads(t, q, mq.DequeueOptions{}, "an abandoned message keeps its priority", "x")
	settle(t, q, mq.Settlement{Token: x.Token, DeadLettered: 1, DeadLetterQueue: "dlq", Reason: "bad"})

	if got := peekID(t, a, "dlq", x.Messages[0].ID); got.Priority != 7 {
		t.Fatalf("Peek of the dead letter = %s with Priority %d; want 7", infoString(got), got.Priority)
	}
	if b := fetchFrom(t, q, "dlq", mq.DequeueOptions{}); b == nil || payloads(b)[0] != "x" {
		t.Fatalf("the dead letter of priority 7 is not delivered first in its queue: got %s", describe(b))
	} else {
		abandon(t, q, b, mq.AbandonOptions{})
	}
	redrive(t, a, mq.RedriveOptions{IDs: []int64{x.Messages[0].ID}}, 1, "Redrive of the dead letter")
	x = fetchPayloads(t, q, mq.DequeueOptions{}, "a redriven message keeps its priority", "x")
	wantPriority(t, x, 7, "Delivery.Priority after Redrive")

	ack(t, q, x, pmsg(9, "then"))
	if ms := peekAll(t, a, qn, mq.PeekOptions{}); len(ms) != 3 || ms[0].Priority != 0 || ms[1].Priority != -2 || ms[2].Priority != 9 {
		t.Fatalf("Peek = %v; want plain (0), k1 (-2) and the Then message (9) with their priorities", ms)
	}
	wantDrained(t, q, "an Ack's Then message carries its own priority", "then", "plain", "k1")
}

func testInvalidPriorityIsRejected(t *testing.T, e env) {
	q := e.open(t)
	for _, p := range []int{mq.MaxPriority + 1, mq.MinPriority - 1, 1 << 40} {
		err := call(t, "Enqueue", func() error { return q.Enqueue(t.Context(), msg("ok"), pmsg(p, "bad")) })
		wantInvalid(t, err, "enqueue", fmt.Sprintf("Enqueue of a message with priority %d", p), "Priority")
		wantShort(t, err, "the error of an out-of-range priority")
	}
	wantEmpty(t, q, qn, "an Enqueue with an invalid priority stores nothing")

	put(t, q, msg("held"))
	b := mustFetch(t, q, mq.DequeueOptions{}, "the valid message")
	err := call(t, "Settle", func() error {
		return q.Settle(t.Context(), mq.Settlement{Token: b.Token, Acked: 1, Then: []mq.Message{pmsg(mq.MaxPriority+1, "bad")}})
	})
	wantInvalid(t, err, "settle", "Settle with a Then message of an invalid priority", "Priority")
	ack(t, q, b) // the rejected settlement changed nothing: the lock is still held
	wantEmpty(t, q, qn, "the rejected Then message was not stored")
	put(t, q, pmsg(mq.MinPriority, "min"), pmsg(mq.MaxPriority, "max"))
	wantDrained(t, q, "the bounds themselves are valid", "max", "min")
}
