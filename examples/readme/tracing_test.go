package readme_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
)

// Tracing (README): the runtime traces every turn and activity through the
// OpenTelemetry API; the application chooses the SDK and the exporter.
func Example_tracing() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Greet", func(_ *runtime.ActivityContext, name string) (string, error) { return "hello " + name, nil })
	_ = reg.RegisterOrchestration("Greeting", func(ctx *runtime.Context, name string) (string, error) {
		return ctx.ScheduleActivity("Greet", name).Get()
	})
	p := adapter.NewMemory(adapter.Options{})
	defer p.Close()
	exporter := tracetest.NewInMemoryExporter() // in production: otlptracegrpc.New(ctx), say

	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
	rt, err := runtime.New(p, reg, runtime.Options{TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	go rt.Run(runCtx)
	ctx, span := tp.Tracer("shop").Start(ctx, "request")                                      // a web request, say
	if err := rt.Client().StartOrchestration(ctx, "greet-1", "Greeting", "ann"); err != nil { // joins its trace
		panic(err)
	}
	span.End()

	if _, err := rt.Client().WaitForOrchestration(ctx, "greet-1"); err != nil {
		panic(err)
	}
	stop()
	_ = tp.ForceFlush(context.Background()) // exports the batched spans
	printTree(exporter.GetSpans(), trace.SpanID{}, "")
	// Output:
	// request
	//   turn Greeting
	//     activity Greet
	//   turn Greeting
}

// printTree prints the spans whose parent is parent, in start order, each with its
// children indented below it.
func printTree(spans tracetest.SpanStubs, parent trace.SpanID, indent string) {
	slices.SortFunc(spans, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	for _, s := range spans {
		if s.Parent.SpanID() == parent {
			fmt.Println(indent + s.Name)
			printTree(spans, s.SpanContext.SpanID(), indent+strings.Repeat(" ", 2))
		}
	}
}
