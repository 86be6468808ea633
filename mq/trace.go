package mq

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/trace"

	"github.com/duroq/duroq/internal/tracectx"
)

// Traced returns msgs with the span in ctx as the TraceParent of each message that
// names none. Every backend calls it where messages enter (Enqueue, and the Then
// messages of Ack and Settle through TracedSettlements), so a Consumer continues the
// producer's trace. It copies msgs only to change one: with tracing off (no span in
// ctx) it returns msgs itself.
func Traced(ctx context.Context, msgs []Message) []Message {
	if tp := tracectx.Parent(ctx); tp != "" {
		msgs, _ = traced(tp, msgs)
	}
	return msgs
}

// TracedSettlements is Traced for the Then messages of ss.
func TracedSettlements(ctx context.Context, ss []Settlement) []Settlement {
	tp := tracectx.Parent(ctx)
	if tp == "" {
		return ss
	}
	var out []Settlement
	for i := range ss {
		if then, changed := traced(tp, ss[i].Then); changed {
			if out == nil {
				out = slices.Clone(ss)
			}
			out[i].Then = then
		}
	}
	if out == nil {
		return ss
	}
	return out
}

// traced gives tp to the messages of msgs without a TraceParent, in a copy, and
// says whether there were any.
func traced(tp string, msgs []Message) ([]Message, bool) {
	var out []Message
	for i := range msgs {
		if msgs[i].TraceParent == "" {
			if out == nil {
				out = slices.Clone(msgs)
			}
			out[i].TraceParent = tp
		}
	}
	if out == nil {
		return msgs, false
	}
	return out, true
}

// maxLinks bounds the links of a batch's span to its messages' producers.
const maxLinks = 128

// producers returns ctx and the span options that tie the processing of b to the
// spans that produced its messages: the producer is the parent of a one-message
// batch (the trace goes on), and a link of each message of a larger batch.
func producers(ctx context.Context, b *Batch) (context.Context, []trace.SpanStartOption) {
	if len(b.Messages) == 1 {
		return tracectx.WithParent(ctx, b.Messages[0].TraceParent), nil
	}
	var links []trace.Link
	for _, d := range b.Messages {
		if sc := tracectx.Remote(d.TraceParent); sc.IsValid() && len(links) < maxLinks {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if links == nil {
		return ctx, nil
	}
	return ctx, []trace.SpanStartOption{trace.WithLinks(links...)}
}
