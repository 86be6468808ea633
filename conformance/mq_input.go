package conformance

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// inputCases: bad input, limits, payload handling, Close and context cancellation.
var inputCases = []mqCase{
	{"EnqueueRejectsInvalidMessages", testEnqueueRejectsInvalidMessages},
	{"EnqueueAcceptsNamesOfMaxSize", testEnqueueAcceptsNamesOfMaxSize},
	{"EnqueueIsAllOrNothingOnInvalidInput", testEnqueueIsAllOrNothingOnInvalidInput},
	{"DequeueRejectsInvalidOptions", testDequeueRejectsInvalidOptions},
	{"AbandonRejectsNegativeDelay", testAbandonRejectsNegativeDelay},
	{"QueueNameIsRequiredEverywhere", testQueueNameIsRequiredEverywhere},
	{"NilAndEmptyPayloadsAreDeliveredAsEmptySlices", testNilAndEmptyPayloadsAreDeliveredAsEmptySlices},
	{"PayloadSizeLimit", testPayloadSizeLimit},
	{"PayloadIsCopied", testPayloadIsCopied},
	{"ClosedQueueFailsEveryMethod", testClosedQueueFailsEveryMethod},
	{"CanceledContextFailsEveryMethodAndChangesNothing", testCanceledContextFailsEveryMethodAndChangesNothing},
}

// tooLong is a name one byte over mq.MaxNameSize.
var tooLong = strings.Repeat("n", mq.MaxNameSize+1)

// wantInvalid fails unless err is an *mq.InvalidError matching mq.ErrInvalid, for op,
// naming one of fields.
func wantInvalid(t *testing.T, err error, op, rule string, fields ...string) {
	t.Helper()
	wantErr(t, err, mq.ErrInvalid, op, rule)
	ie, ok := errors.AsType[*mq.InvalidError](err)
	if !ok {
		t.Errorf("%s: the error %v (%T) is not an *mq.InvalidError", rule, err, err)
		return
	}
	for _, f := range fields {
		if strings.Contains(ie.Field, f) {
			return
		}
	}
	t.Errorf("%s: the error's Field %q names none of %q", rule, ie.Field, fields)
}

func testEnqueueRejectsInvalidMessages(t *testing.T, e env) {
	q := e.open(t)
	for _, c := range []struct {
		rule   string
		m      mq.Message
		fields []string
	}{
		{"an empty queue name", mq.Message{Payload: []byte("x")}, []string{"Queue"}},
		{"a queue name over MaxNameSize", mq.Message{Queue: tooLong}, []string{"Queue"}},
		{"a routing key over MaxNameSize", mq.Message{Queue: qn, RoutingKey: tooLong}, []string{"RoutingKey"}},
		{"a tag over MaxNameSize", mq.Message{Queue: qn, Tag: tooLong}, []string{"Tag"}},
		{"a session over MaxNameSize", mq.Message{Queue: qn, Session: tooLong}, []string{"Session"}},
		{"a message key over MaxNameSize", mq.Message{Queue: qn, Key: tooLong}, []string{"Key"}},
		{"a routing key together with a session", mq.Message{Queue: qn, RoutingKey: "A", Session: "s1"}, []string{"Session", "RoutingKey"}},
		{"a negative Delay", mq.Message{Queue: qn, Delay: -time.Millisecond}, []string{"Delay"}},
		{"a queue name that is not UTF-8", mq.Message{Queue: "q\xff"}, []string{"Queue"}},
		{"a routing key with a NUL byte", mq.Message{Queue: qn, RoutingKey: "a\x00b"}, []string{"RoutingKey"}},
		{"a message key that is not UTF-8", mq.Message{Queue: qn, Key: "k\xc3"}, []string{"Key"}},
	} {
		err := call(t, "Enqueue", func() error { return q.Enqueue(t.Context(), c.m) })
		wantInvalid(t, err, "enqueue", "Enqueue of a message with "+c.rule, c.fields...)
	}
	wantEmpty(t, q, qn, "rejected messages are not stored")
}

func testEnqueueAcceptsNamesOfMaxSize(t *testing.T, e env) {
	q := e.open(t)
	full := func(c string) string { return strings.Repeat(c, mq.MaxNameSize) }
	queue := full("q")
	put(t, q,
		mq.Message{Queue: queue, RoutingKey: full("r"), Tag: full("t"), Key: full("k"), Payload: []byte("1")},
		mq.Message{Queue: queue, Session: full("s"), Payload: []byte("2")},
	)
	b := fetchFrom(t, q, queue, mq.DequeueOptions{Tags: mq.Tags(full("t"))})
	if b == nil {
		t.Fatal("a message whose names are exactly MaxNameSize bytes was accepted but is not delivered")
	}
	d := b.Messages[0]
	if b.RoutingKey != full("r") || d.Tag != full("t") || d.Key != full("k") {
		t.Fatal("names of exactly MaxNameSize bytes did not round-trip")
	}
	if n, err := q.Remove(t.Context(), queue, full("k")); err != nil || n != 1 {
		t.Fatalf("Remove by a key of MaxNameSize bytes = %d, %v; want 1, nil", n, err)
	}
	s := fetchFrom(t, q, queue, withSession(full("o"), long))
	if s == nil || s.Messages[0].Session != full("s") {
		t.Fatalf("a session name of MaxNameSize bytes did not round-trip: got %s", describe(s))
	}
}

func testEnqueueIsAllOrNothingOnInvalidInput(t *testing.T, e env) {
	q := e.open(t)
	err := call(t, "Enqueue", func() error {
		return q.Enqueue(t.Context(),
			mq.Message{Queue: "q1", Payload: []byte("1")},
			mq.Message{Queue: "q2", RoutingKey: "A", Payload: []byte("2")},
			mq.Message{Queue: "q1", Key: "k", Payload: []byte("3")},
			mq.Message{Queue: "q1", Payload: []byte("4"), Delay: -time.Second},
		)
	})
	wantInvalid(t, err, "enqueue", "an Enqueue of three valid messages and one with a negative Delay", "Delay")
	err = call(t, "Enqueue", func() error {
		return q.Enqueue(t.Context(),
			mq.Message{Queue: "q1", Payload: []byte("1")},
			mq.Message{Queue: "q2", Payload: make([]byte, mq.MaxPayloadSize+1)},
		)
	})
	wantErr(t, err, mq.ErrPayloadTooLarge, "enqueue", "an Enqueue of a valid message and an oversized one")
	wantEmpty(t, q, "q1", "a rejected Enqueue stores none of its messages")
	wantEmpty(t, q, "q2", "a rejected Enqueue stores none of its messages")
	put(t, q, mq.Message{Queue: "q1", Key: "k", Payload: []byte("3")})
}

func testDequeueRejectsInvalidOptions(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"))
	for _, c := range invalidDequeues() {
		b, err := call2(t, "DequeueBatch", func() (*mq.Batch, error) { return q.DequeueBatch(t.Context(), c.queue, c.opts) })
		if b != nil {
			t.Errorf("DequeueBatch with %s returned a batch %s", c.rule, describe(b))
		}
		wantInvalid(t, err, "dequeue", "DequeueBatch with "+c.rule, c.fields...)
	}
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "rejected DequeueBatch calls lock nothing", "u1")
	wantAttempts(t, b, "rejected DequeueBatch calls count no attempt", 1)
}

// invalidDequeue is dequeue input the contract rejects, and the fields its error names.
type invalidDequeue struct {
	rule   string
	queue  string
	opts   mq.DequeueOptions
	fields []string
}

// invalidDequeues is the input DequeueBatch and DequeueBatches both reject.
func invalidDequeues() []invalidDequeue {
	return []invalidDequeue{
		{"an empty queue name", "", mq.DequeueOptions{}, []string{"queue", "Queue"}},
		{"a queue name over MaxNameSize", tooLong, mq.DequeueOptions{}, []string{"queue", "Queue"}},
		{"a negative LockTimeout", qn, mq.DequeueOptions{LockTimeout: -time.Second}, []string{"LockTimeout"}},
		{"a negative Wait", qn, mq.DequeueOptions{Wait: -time.Second}, []string{"Wait"}},
		{"an unknown tag mode", qn, mq.DequeueOptions{Tags: mq.TagFilter{Mode: mq.TagNone + 1}}, []string{"Tags"}},
		{"an empty session owner", qn, withSession("", long), []string{"Owner"}},
		{"a session owner over MaxNameSize", qn, withSession(tooLong, long), []string{"Owner"}},
		{"a negative session LeaseTimeout", qn, withSession(ownerA, -time.Second), []string{"LeaseTimeout"}},
	}
}

func testAbandonRejectsNegativeDelay(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	err := call(t, "Abandon", func() error { return q.Abandon(t.Context(), b.Token, mq.AbandonOptions{Delay: -time.Second}) })
	wantInvalid(t, err, "abandon", "Abandon with a negative Delay", "Delay")
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a rejected Abandon must leave the live lock held")
	ack(t, q, b)
}

func testQueueNameIsRequiredEverywhere(t *testing.T, e env) {
	q := e.open(t)
	ctx := t.Context()
	for _, queue := range []string{"", tooLong} {
		for _, c := range []struct {
			op string
			fn func() error
		}{
			{"remove", func() error { _, err := q.Remove(ctx, queue, "k"); return err }},
			{"purge", func() error { _, err := q.PurgeKey(ctx, queue, "A"); return err }},
			{"attr", func() error { return q.SetKeyAttr(ctx, queue, "A", i64(1)) }},
			{"renewsession", func() error { _, err := q.RenewSessions(ctx, queue, []string{ownerA}, long, long); return err }},
			{"cleanup", func() error { _, err := q.CleanupSessions(ctx, queue); return err }},
			{"stats", func() error { _, err := q.Stats(ctx, queue); return err }},
		} {
			err := call(t, c.op, c.fn)
			wantInvalid(t, err, c.op, "a queue name of "+sizeOf(queue), "queue", "Queue")
		}
	}
}

func sizeOf(s string) string {
	if s == "" {
		return "zero bytes"
	}
	return "more than MaxNameSize bytes"
}

func testNilAndEmptyPayloadsAreDeliveredAsEmptySlices(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, mq.Message{Queue: qn}, mq.Message{Queue: qn, Payload: []byte{}}, mq.Message{Queue: qn, RoutingKey: "A"})
	for _, what := range []string{"a nil payload", "an empty payload", "a keyed nil payload"} {
		b := mustFetch(t, q, mq.DequeueOptions{}, what)
		if p := b.Messages[0].Payload; p == nil || len(p) != 0 {
			t.Fatalf("%s is delivered as %#v, want a non-nil empty slice", what, p)
		}
	}
}

func testPayloadSizeLimit(t *testing.T, e env) {
	q := e.open(t)
	big := make([]byte, mq.MaxPayloadSize+1)
	err := call(t, "Enqueue", func() error { return q.Enqueue(t.Context(), mq.Message{Queue: qn, Payload: big}) })
	wantErr(t, err, mq.ErrPayloadTooLarge, "enqueue", "a payload of MaxPayloadSize+1 bytes")
	wantEmpty(t, q, qn, "the oversized message is not stored")

	exact := make([]byte, mq.MaxPayloadSize)
	for i := range exact {
		exact[i] = byte(i*31 + i>>11)
	}
	put(t, q, mq.Message{Queue: qn, Payload: exact})
	b := mustFetch(t, q, mq.DequeueOptions{}, "a payload of exactly MaxPayloadSize bytes is accepted")
	if !bytes.Equal(b.Messages[0].Payload, exact) {
		t.Fatalf("a payload of MaxPayloadSize bytes came back with %d bytes and different content", len(b.Messages[0].Payload))
	}
}

func testPayloadIsCopied(t *testing.T, e env) {
	q := e.open(t)
	p := []byte("original")
	put(t, q, mq.Message{Queue: qn, Payload: p})
	copy(p, "XXXXXXXX")
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "changing the caller's slice after Enqueue must not change the stored message", "original")
	copy(b.Messages[0].Payload, "YYYYYYYY")
	abandon(t, q, b, mq.AbandonOptions{})
	fetchPayloads(t, q, mq.DequeueOptions{}, "changing a delivered payload must not change the stored message", "original")
}

func testClosedQueueFailsEveryMethod(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, msg("u1"), kmsg("A", "a1"))
	b := mustFetch(t, q, mq.DequeueOptions{}, "u1")
	if err := q.Close(); err != nil {
		t.Fatalf("Close failed: %v", err)
	}
	ctx := t.Context()
	for _, c := range []struct {
		op string
		fn func() error
	}{
		{"enqueue", func() error { return q.Enqueue(ctx, msg("x")) }},
		{"dequeue", func() error { _, err := q.DequeueBatch(ctx, qn, mq.DequeueOptions{}); return err }},
		{"dequeue", func() error { _, err := q.DequeueBatch(ctx, qn, mq.DequeueOptions{Wait: time.Second}); return err }},
		{"ack", func() error { return q.Ack(ctx, b.Token) }},
		{"abandon", func() error { return q.Abandon(ctx, b.Token, mq.AbandonOptions{}) }},
		{"renew", func() error { _, err := q.Renew(ctx, b.Token, long); return err }},
		{"remove", func() error { _, err := q.Remove(ctx, qn, "k"); return err }},
		{"purge", func() error { _, err := q.PurgeKey(ctx, qn, "A"); return err }},
		{"attr", func() error { return q.SetKeyAttr(ctx, qn, "A", i64(1)) }},
		{"renewsession", func() error { _, err := q.RenewSessions(ctx, qn, []string{ownerA}, long, long); return err }},
		{"cleanup", func() error { _, err := q.CleanupSessions(ctx, qn); return err }},
		{"stats", func() error { _, err := q.Stats(ctx, qn); return err }},
	} {
		start := time.Now()
		err := call(t, c.op, c.fn)
		wantErr(t, err, mq.ErrClosed, c.op, "a call after Close")
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("%s after Close took %v to fail; it must fail at once", c.op, took)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatalf("a second Close failed: %v; Close is idempotent", err)
	}
}

func testCanceledContextFailsEveryMethodAndChangesNothing(t *testing.T, e env) {
	q := e.open(t)
	put(t, q, keyed("", "k1", "u1"), kmsg("A", "a1"))
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "u1", "u1")
	ctx := canceledCtx(t)
	for _, c := range []struct {
		op string
		fn func() error
	}{
		{"Enqueue", func() error { return q.Enqueue(ctx, msg("x")) }},
		{"DequeueBatch", func() error { _, err := q.DequeueBatch(ctx, qn, mq.DequeueOptions{}); return err }},
		{"Ack", func() error { return q.Ack(ctx, b.Token, msg("follow-up")) }},
		{"Abandon", func() error { return q.Abandon(ctx, b.Token, mq.AbandonOptions{}) }},
		{"Renew", func() error { _, err := q.Renew(ctx, b.Token, long); return err }},
		{"Remove", func() error { _, err := q.Remove(ctx, qn, "k1"); return err }},
		{"PurgeKey", func() error { _, err := q.PurgeKey(ctx, qn, "A"); return err }},
		{"SetKeyAttr", func() error { return q.SetKeyAttr(ctx, qn, "A", i64(1)) }},
		{"RenewSessions", func() error { _, err := q.RenewSessions(ctx, qn, []string{ownerA}, long, long); return err }},
		{"CleanupSessions", func() error { _, err := q.CleanupSessions(ctx, qn); return err }},
		{"Stats", func() error { _, err := q.Stats(ctx, qn); return err }},
	} {
		err := call(t, c.op, c.fn)
		wantErrIs(t, err, context.Canceled, c.op, "a call with a canceled context must return the context's error")
	}
	wantStats(t, q, qn, mq.Stats{Ready: 1, Locked: 1}, "calls that failed with a canceled context change nothing")
	a := fetchPayloads(t, q, attrs(5, 5), "key A has no attribute and was not purged or fetched", "a1")
	wantAttempts(t, a, "the canceled DequeueBatch did not fetch", 1)
	if _, err := q.Renew(t.Context(), b.Token, long); err != nil {
		t.Fatalf("the batch whose Ack and Abandon failed with a canceled context must still be held: Renew failed with %v", err)
	}
	ack(t, q, b)
	wantStats(t, q, qn, mq.Stats{Locked: 1}, "only a1 remains")
}
