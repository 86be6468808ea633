package conformance

import (
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// ackCases: peek-lock and Ack with follow-up messages.
var ackCases = []mqCase{
	{"PeekLockHidesFetchedMessagesUntilAck", testPeekLockHidesFetchedMessagesUntilAck},
	{"AckEnqueuesFollowUpMessages", testAckEnqueuesFollowUpMessages},
	{"FailedAckEnqueuesNoFollowUps", testFailedAckEnqueuesNoFollowUps},
	{"AckWithInvalidFollowUpChangesNothing", testAckWithInvalidFollowUpChangesNothing},
	{"AckWithDuplicateKeyFollowUpChangesNothing", testAckWithDuplicateKeyFollowUpChangesNothing},
}

func testPeekLockHidesFetchedMessagesUntilAck(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a fetched message is invisible to other consumers while locked")
	wantStats(t, q, qn, mq.Stats{Locked: 1}, "u1 is locked")
	ack(t, q, b)
	wantEmpty(t, q, qn, "an acked message is deleted")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "an acked message is never delivered again")
}

func testAckEnqueuesFollowUpMessages(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, kmsg("A", "a1"), msg("u0"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1")
	ack(t, q, b,
		kmsg("A", "a-next"),
		msg("u-next"),
		mq.Message{Queue: "other", Payload: []byte("o1"), Tag: "gpu"},
		mq.Message{Queue: qn, Payload: []byte("later"), Delay: long},
		mq.Message{Queue: qn, Payload: []byte("keyed"), Key: "follow-up-key"},
	)
	wantStats(t, q, qn, mq.Stats{Ready: 4, Delayed: 1}, "the Ack deleted a1 and enqueued four visible and one delayed follow-up in this queue")
	wantStats(t, q, "other", mq.Stats{Ready: 1}, "the Ack enqueued a follow-up in queue other")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the pending message enqueued before the Ack comes first", "u0")
	fetchPayloads(t, q, mq.DequeueOptions{}, "the follow-up of the acked key is fetchable: the Ack released the key", "a-next")
	fetchPayloads(t, q, mq.DequeueOptions{}, "follow-ups come in the order given", "u-next")
	k := fetchPayloads(t, q, mq.DequeueOptions{}, "follow-ups come in the order given", "keyed")
	if k.Messages[0].Key != "follow-up-key" {
		t.Errorf("the follow-up's message key is %q, want %q", k.Messages[0].Key, "follow-up-key")
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "the delayed follow-up honours its Delay")
	o := fetchFrom(t, q, "other", mq.DequeueOptions{})
	if o == nil || string(o.Messages[0].Payload) != "o1" || o.Messages[0].Tag != "gpu" {
		t.Fatalf("queue other: got %s, want the follow-up o1 tagged gpu", describe(o))
	}
}

func testFailedAckEnqueuesNoFollowUps(t *testing.T, e env) {
	q, clk := e.openClock(t)
	put(t, q, msg("u1"))
	b := fetchPayloads(t, q, short, "u1", "u1")
	err := q.Ack(t.Context(), "no-such-token", msg("f0"), mq.Message{Queue: "other", Payload: []byte("f0")})
	wantLockLost(t, err, "ack", "an Ack with an unknown token")
	clk.past(b.LockedUntil)
	err = q.Ack(t.Context(), b.Token, msg("f1"), mq.Message{Queue: "other", Payload: []byte("f2")},
		mq.Message{Queue: qn, Payload: []byte("f3"), Delay: long})
	wantLockLost(t, err, "ack", "an Ack after the lock lapsed")
	wantStats(t, q, "other", mq.Stats{}, "a failed Ack must enqueue none of its follow-ups")
	wantStats(t, q, qn, mq.Stats{Ready: 1}, "a failed Ack must enqueue none of its follow-ups and keep its message")
	r := fetchPayloads(t, q, mq.DequeueOptions{}, "the message of the failed Ack is fetchable again", "u1")
	wantAttempts(t, r, "second fetch", 2)
}

func testAckWithInvalidFollowUpChangesNothing(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	err := call(t, "Ack", func() error {
		return q.Ack(t.Context(), b.Token, msg("valid"), mq.Message{Queue: qn, Payload: []byte("bad"), Delay: -time.Second})
	})
	wantErr(t, err, mq.ErrInvalid, "ack", "an Ack whose follow-up has a negative Delay")
	err = call(t, "Ack", func() error {
		return q.Ack(t.Context(), b.Token, mq.Message{Queue: qn, Payload: make([]byte, mq.MaxPayloadSize+1)})
	})
	wantErr(t, err, mq.ErrPayloadTooLarge, "ack", "an Ack whose follow-up payload is too large")
	wantStats(t, q, qn, mq.Stats{Locked: 1}, "a rejected Ack deletes nothing, enqueues nothing and keeps the lock")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a rejected Ack must leave the live lock held")
	ack(t, q, b)
	wantEmpty(t, q, qn, "the holder acked")
}

func testAckWithDuplicateKeyFollowUpChangesNothing(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"), mq.Message{Queue: qn, Payload: []byte("holder"), Key: "taken", Delay: long})
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	err := q.Ack(t.Context(), b.Token, msg("valid"), mq.Message{Queue: qn, Payload: []byte("dup"), Key: "taken"})
	wantErrIs(t, err, mq.ErrDuplicateKey, "Ack", "an Ack whose follow-up reuses a pending message key")
	wantStats(t, q, qn, mq.Stats{Delayed: 1, Locked: 1}, "a rejected Ack deletes nothing, enqueues nothing and keeps the lock")
	err = q.Ack(t.Context(), b.Token, mq.Message{Queue: qn, Payload: []byte("d1"), Key: "twice"}, mq.Message{Queue: qn, Payload: []byte("d2"), Key: "twice"})
	wantErrIs(t, err, mq.ErrDuplicateKey, "Ack", "an Ack whose follow-ups repeat a message key")
	wantStats(t, q, qn, mq.Stats{Delayed: 1, Locked: 1}, "a rejected Ack deletes nothing, enqueues nothing and keeps the lock")
	ack(t, q, b, msg("after"))
	fetchPayloads(t, q, mq.DequeueOptions{}, "the follow-up of the successful Ack", "after")
}
