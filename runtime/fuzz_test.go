package runtime_test

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// The decoders take whatever a store hands back: never a panic, and what decodes
// encodes to the same value again.
func FuzzUnmarshalEvent(f *testing.F) {
	for _, e := range []provider.Event{
		{Kind: provider.EventOrchestrationStarted, EventID: 1, Name: "Checkout", Version: "1.0.0", Input: `{"order":42}`},
		{Kind: provider.EventActivityCompleted, EventID: 3, SourceEventID: 2, Result: "ok"},
		{Kind: provider.EventActivityFailed, EventID: 4, SourceEventID: 2, Details: &provider.ErrorDetails{Kind: provider.ErrorApplication, Message: "boom"}},
		{Kind: provider.EventTimerCreated, EventID: 5, FireAtMs: 1_700_000_000_000},
	} {
		b, err := provider.MarshalEvent(&e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, b, provider.UnmarshalEvent, provider.MarshalEvent) })
}

func FuzzUnmarshalWorkItem(f *testing.F) {
	for _, w := range []provider.WorkItem{
		{Kind: provider.WorkStartOrchestration, Instance: "order-1", Name: "Checkout", Input: "{}", Version: "1.0.0"},
		{Kind: provider.WorkActivityCompleted, Instance: "order-1", ExecutionID: 1, ID: 2, Result: "ok"},
		{Kind: provider.WorkExternalRaised, Instance: "order-1", Name: "approve", Data: "yes"},
	} {
		b, err := provider.MarshalWorkItem(&w)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, b, provider.UnmarshalWorkItem, provider.MarshalWorkItem) })
}

// roundTrip decodes b (never a panic) and, when it decodes, encodes it and decodes
// that again to the same value.
func roundTrip[T any](t *testing.T, b []byte, decode func([]byte) (T, error), encode func(*T) ([]byte, error)) {
	v, err := decode(b)
	if err != nil {
		return
	}
	again, err := encode(&v)
	if err != nil {
		t.Fatalf("a value that decoded does not encode: %v", err)
	}
	back, err := decode(again)
	if err != nil || !reflect.DeepEqual(back, v) {
		t.Fatalf("round trip: %+v -> %+v (%v)", v, back, err)
	}
}

// fuzzKinds are the event kinds fuzzHistory draws from.
var fuzzKinds = []provider.EventKind{
	provider.EventOrchestrationStarted, provider.EventActivityScheduled, provider.EventActivityCompleted,
	provider.EventActivityFailed, provider.EventTimerCreated, provider.EventTimerFired,
	provider.EventExternalSubscribed, provider.EventExternalEvent, provider.EventQueueSubscribed,
	provider.EventQueueEventDelivered, provider.EventSubOrchestrationScheduled, provider.EventSubOrchestrationCompleted,
	provider.EventCustomStatusUpdated, provider.EventKeyValueSet, provider.EventOrchestrationCancelRequested,
	provider.EventOrchestrationCompleted, provider.EventOrchestrationContinuedAsNew,
}

// fuzzHistory turns b into a history, three bytes an event: kind, event id and
// source id (small numbers, so that the events refer to each other), with names the
// fuzz orchestration uses.
func fuzzHistory(b []byte) []provider.Event {
	names := []string{"A", "B", "approve", "q"}
	var h []provider.Event
	for i := 0; i+2 < len(b) && len(h) < 64; i += 3 {
		e := provider.Event{Kind: fuzzKinds[int(b[i])%len(fuzzKinds)], EventID: uint64(b[i+1] % 16), SourceEventID: uint64(b[i+2] % 16),
			Name: names[int(b[i+2])%len(names)], Result: "r", Data: "d", Input: "in", Key: "k", Value: "v", FireAtMs: int64(b[i+1]) * 1000}
		if e.Kind == provider.EventActivityFailed {
			e.Details = &provider.ErrorDetails{Kind: provider.ErrorApplication, Message: "failed"}
		}
		h = append(h, e)
	}
	return h
}

// fuzzOrchestration does a bit of everything an orchestration does.
func fuzzOrchestration(ctx *runtime.Context, in string) (string, error) {
	a := ctx.ScheduleActivity("A", in)
	timer := ctx.CreateTimer(time.Second)
	if _, err := a.Get(); err != nil {
		return "", err
	}
	ctx.SetCustomStatus("half")
	if _, err := timer.Get(); err != nil {
		return "", err
	}
	if _, err := ctx.WaitForEvent("approve").Get(); err != nil {
		return "", err
	}
	for i := range 2 {
		if _, err := ctx.ScheduleActivity("B", strconv.Itoa(i)).Get(); err != nil {
			return "", err
		}
	}
	return "done", nil
}

// The replay engine fed an arbitrary history never panics: it runs the turn or
// fails the execution, saying why.
func FuzzRunTurn(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 2, 0, 2, 3, 2})
	f.Add([]byte{0, 1, 0, 1, 2, 0, 4, 3, 0, 2, 4, 2, 5, 5, 4})
	f.Add([]byte{1, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		history := fuzzHistory(b)
		res := runtime.RunTurn(runtime.Turn{Instance: "fuzz", ExecutionID: 1, History: history, Now: time.UnixMilli(1_700_000_000_000)}, fuzzOrchestration)
		switch res.Status {
		case provider.StatusFailed:
			if res.Failure == nil {
				t.Fatalf("a failed turn without its failure, on history %+v", history)
			}
		case provider.StatusRunning, provider.StatusCompleted, provider.StatusContinuedAsNew:
		default:
			t.Fatalf("turn status %q on history %+v", res.Status, history)
		}
	})
}
