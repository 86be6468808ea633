package conformance

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/duroq/duroq/mq"
)

// traceCases: a message carries the W3C traceparent of the span that produced it,
// so that a consumer continues the producer's trace (issue 19).
var traceCases = []mqCase{
	{"TraceParentTravelsWithTheMessage", testTraceParentTravelsWithTheMessage},
	{"EnqueueTakesTheSpanOfItsContext", testEnqueueTakesTheSpanOfItsContext},
	{"DeadLettersAndRedriveKeepTheTraceParent", testDeadLettersAndRedriveKeepTheTraceParent},
	{"InvalidTraceParentIsRejected", testInvalidTraceParentIsRejected},
}

// spanContext is a sampled span context whose trace and span ids end in n.
func spanContext(n byte) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0xd0, 0x7, 15: n},
		SpanID:     trace.SpanID{0x5b, 7: n},
		TraceFlags: trace.FlagsSampled,
	})
}

// w3c is the traceparent of spanContext(n).
func w3c(n byte) string {
	sc := spanContext(n)
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// spanCtx is the test's context holding spanContext(n) as its current span, as an
// instrumented caller's context would.
func spanCtx(t *testing.T, n byte) context.Context {
	return trace.ContextWithSpanContext(t.Context(), spanContext(n))
}

// traces are the TraceParents of b's messages.
func traces(b *mq.Batch) []string {
	var out []string
	for _, d := range b.Messages {
		out = append(out, d.TraceParent)
	}
	return out
}

func testTraceParentTravelsWithTheMessage(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	m1, m2 := kmsg("A", "a1"), kmsg("A", "a2")
	m1.TraceParent = w3c(1)
	u := msg("u1")
	u.TraceParent = w3c(2)
	put(t, q, m1, m2, u, msg("plain"))
	infos := peek(t, a, qn, mq.PeekOptions{})
	if len(infos) != 4 || infos[0].TraceParent != w3c(1) || infos[1].TraceParent != "" || infos[2].TraceParent != w3c(2) || infos[3].TraceParent != "" {
		t.Fatalf("Peek reports %d messages with TraceParents %v, want [%s, \"\", %s, \"\"]", len(infos), infoTraces(infos), w3c(1), w3c(2))
	}
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "key A", "a1", "a2")
	if got := traces(b); got[0] != w3c(1) || got[1] != "" {
		t.Fatalf("the batch of key A delivers TraceParents %q, want [%s, \"\"]", got, w3c(1))
	}
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "un-keyed u1", "u1")
	if got := traces(b); got[0] != w3c(2) {
		t.Fatalf("u1 is delivered with TraceParent %q, want %s", got[0], w3c(2))
	}
	// Many batches in one fetch (the Consumer's path with Concurrency > 1) carry them too.
	v := msg("v1")
	v.TraceParent = w3c(3)
	put(t, q, v)
	bs, err := q.DequeueBatches(t.Context(), qn, mq.DequeueOptions{}, 4)
	if err != nil || len(bs) != 2 {
		t.Fatalf("DequeueBatches = %d batches, %v; want plain and v1", len(bs), err)
	}
	if got := []string{bs[0].Messages[0].TraceParent, bs[1].Messages[0].TraceParent}; got[0] != "" || got[1] != w3c(3) {
		t.Fatalf("DequeueBatches delivers TraceParents %q, want [\"\", %s]", got, w3c(3))
	}
}

func infoTraces(ms []mq.MessageInfo) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.TraceParent)
	}
	return out
}

func testEnqueueTakesTheSpanOfItsContext(t *testing.T, e env) {
	q := e.open(t)
	own := msg("own")
	own.TraceParent = w3c(9)
	if err := q.Enqueue(spanCtx(t, 1), msg("from-ctx"), own); err != nil {
		t.Fatalf("Enqueue with a span in its context: %v", err)
	}
	if own.TraceParent != w3c(9) {
		t.Fatalf("Enqueue changed the caller's message")
	}
	b := fetchPayloads(t, q, mq.DequeueOptions{}, "first", "from-ctx")
	if got := b.Messages[0].TraceParent; got != w3c(1) {
		t.Fatalf("a message without TraceParent enqueued under span 1 carries %q, want %s", got, w3c(1))
	}
	// Follow-ups of an Ack take the span of the Ack's context.
	if err := q.Ack(spanCtx(t, 2), b.Token, msg("ack-then")); err != nil {
		t.Fatalf("Ack with a follow-up: %v", err)
	}
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "second", "own")
	if got := b.Messages[0].TraceParent; got != w3c(9) {
		t.Fatalf("a message enqueued with its own TraceParent carries %q, want it kept: %s", got, w3c(9))
	}
	if err := q.Settle(spanCtx(t, 3), mq.Settlement{Token: b.Token, Acked: 1, Then: []mq.Message{msg("settle-then")}}); err != nil {
		t.Fatalf("Settle with a follow-up: %v", err)
	}
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "third", "ack-then")
	if got := b.Messages[0].TraceParent; got != w3c(2) {
		t.Fatalf("Ack's follow-up carries %q, want the Ack's span %s", got, w3c(2))
	}
	settle(t, q, mq.Settlement{Token: b.Token, Acked: 1})
	b = fetchPayloads(t, q, mq.DequeueOptions{}, "fourth", "settle-then")
	if got := b.Messages[0].TraceParent; got != w3c(3) {
		t.Fatalf("Settle's follow-up carries %q, want the Settle's span %s", got, w3c(3))
	}
	// Without a span nothing is stamped.
	settle(t, q, mq.Settlement{Token: b.Token, Acked: 1})
	put(t, q, msg("untraced"))
	if got := fetchPayloads(t, q, mq.DequeueOptions{}, "fifth", "untraced").Messages[0].TraceParent; got != "" {
		t.Fatalf("a message enqueued without a span carries TraceParent %q", got)
	}
}

func testDeadLettersAndRedriveKeepTheTraceParent(t *testing.T, e env) {
	q := e.open(t)
	a := asAdmin(t, q)
	m := kmsg("K", "k1")
	m.TraceParent = w3c(4)
	put(t, q, m)
	deadLetter(t, q, "bad")
	if ms := peek(t, a, "dlq", mq.PeekOptions{}); len(ms) != 1 || ms[0].TraceParent != w3c(4) {
		t.Fatalf("the dead letter reports TraceParents %q, want [%s]", infoTraces(ms), w3c(4))
	}
	redrive(t, a, mq.RedriveOptions{}, 1, "Redrive of the traced dead letter")
	if got := fetchPayloads(t, q, mq.DequeueOptions{}, "redriven", "k1").Messages[0].TraceParent; got != w3c(4) {
		t.Fatalf("the redriven message carries TraceParent %q, want %s", got, w3c(4))
	}
}

func testInvalidTraceParentIsRejected(t *testing.T, e env) {
	q := e.open(t)
	huge := "00-" + strings.Repeat("a", 1<<20)
	for _, c := range []struct{ rule, tp string }{
		{"a TraceParent that is not one", "garbage"},
		{"a TraceParent with an all-zero trace id", "00-00000000000000000000000000000000-0102030405060708-01"},
		{"a TraceParent of a megabyte", huge},
	} {
		m := msg("x")
		m.TraceParent = c.tp
		err := q.Enqueue(t.Context(), msg("good"), m)
		wantInvalid(t, err, "enqueue", c.rule, "TraceParent")
		if err != nil && len(err.Error()) > 1000 {
			t.Errorf("%s: the error is %d bytes long; errors never echo unbounded input", c.rule, len(err.Error()))
		}
	}
	mustFetchNothing(t, q, mq.DequeueOptions{}, "a rejected Enqueue stores none of its messages")
}
