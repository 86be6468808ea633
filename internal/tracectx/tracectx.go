package tracectx

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// MaxSize bounds a stored traceparent: version 00 takes 55 bytes, and a later
// version may append fields.
const MaxSize = 256

var w3c = propagation.TraceContext{}

// Parent is the traceparent of the span in ctx ("" when ctx holds none or an
// invalid one: tracing is off).
func Parent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c.Get("traceparent")
}

// Remote is the span context tp names (invalid when tp is empty or malformed).
func Remote(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
}

// WithParent returns ctx with the remote span tp names as its parent (ctx itself
// when tp is empty or malformed).
func WithParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}
