package tracectx

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestRoundTrip(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	tp := Parent(trace.ContextWithSpanContext(context.Background(), sc))
	if want := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"; tp != want {
		t.Fatalf("Parent = %q, want %q", tp, want)
	}
	if got := Remote(tp); !got.Equal(sc.WithRemote(true)) {
		t.Fatalf("Remote(%q) = %v, want %v", tp, got, sc)
	}
	if got := trace.SpanContextFromContext(WithParent(context.Background(), tp)); got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Fatalf("WithParent(%q) holds %v", tp, got)
	}
}

func TestOffAndMalformed(t *testing.T) {
	if tp := Parent(context.Background()); tp != "" {
		t.Fatalf("Parent of a context without a span = %q", tp)
	}
	for _, tp := range []string{"", "garbage", "00-00000000000000000000000000000000-0102030405060708-01"} {
		if Remote(tp).IsValid() {
			t.Errorf("Remote(%q) is valid", tp)
		}
		if ctx := context.Background(); WithParent(ctx, tp) != ctx && trace.SpanContextFromContext(WithParent(ctx, tp)).IsValid() {
			t.Errorf("WithParent(%q) gave a valid parent", tp)
		}
	}
}
