package fill

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// The fill stores what the runtime stores when it runs the same instances: the
// same metadata (times apart), histories (timestamps apart) and empty queues, and
// each instance's two turns are two writes.
func TestInstancesAreWhatTheRuntimeWrites(t *testing.T) {
	const n = 40
	ctx := t.Context()
	filled := adapter.NewMemory(adapter.Options{})
	defer filled.Close()
	if err := Instances(ctx, filled.Store().(eventstore.TxStore), n, Options{Batch: 16}); err != nil {
		t.Fatal(err)
	}

	ran := adapter.NewMemory(adapter.Options{})
	defer ran.Close()
	reg := runtime.NewRegistry()
	for _, name := range Names {
		if err := reg.RegisterOrchestrationVersion(name, Version, orchestration); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.RegisterActivity("Charge", func(_ *runtime.ActivityContext, input string) (string, error) { return charge(input) }); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(ran, reg, runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- rt.Run(runCtx) }()
	defer func() { stop(); <-stopped }()
	for i := range n {
		if err := rt.Client().StartOrchestrationVersioned(ctx, ID("fill-", i), Names[i%len(Names)], Version, input(i)); err != nil {
			t.Fatal(err)
		}
	}

	for i := range n {
		instance := ID("fill-", i)
		want := settledHistory(t, ran, instance)
		got, err := filled.ReadHistory(ctx, instance)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(timeless(got), timeless(want)) {
			t.Fatalf("%s: the fill stored history\n%+v\nthe runtime stored\n%+v", instance, got, want)
		}
		if info, err := filled.Store().Stream(ctx, instance); err != nil || !info.UpdatedAt.After(info.CreatedAt) {
			t.Fatalf("%s: created at %v, updated at %v, %v; want its second turn written after its first", instance, info.CreatedAt, info.UpdatedAt, err)
		}
		gotInfo, wantInfo := streamInfo(t, filled, instance), streamInfo(t, ran, instance)
		if !reflect.DeepEqual(gotInfo, wantInfo) {
			t.Fatalf("%s: the fill stored metadata %+v; the runtime stored %+v", instance, gotInfo, wantInfo)
		}
	}
	for _, p := range []*adapter.Provider{filled, ran} {
		depths, err := p.GetQueueDepths(ctx)
		if err != nil || depths != (provider.QueueDepths{}) {
			t.Fatalf("queue depths after the instances settled = %+v, %v; want none left", depths, err)
		}
	}
	metrics, err := filled.GetSystemMetrics(ctx)
	if err != nil || metrics.TotalInstances != n || metrics.CompletedInstances != 28 || metrics.RunningInstances != 8 || metrics.FailedInstances != 4 {
		t.Fatalf("GetSystemMetrics = %+v, %v; want 40 instances: 28 completed, 8 running, 4 failed", metrics, err)
	}
}

// settledHistory waits until the runtime has run the instance as far as it goes
// (ended, or waiting for its event) and returns its history.
func settledHistory(t *testing.T, p *adapter.Provider, instance string) []provider.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := p.ReadHistory(t.Context(), instance)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(h); n > 0 && (h[n-1].IsTerminal() || h[n-1].Kind == provider.EventExternalSubscribed) {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not settle: %+v", instance, h)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// timeless returns events without their timestamps.
func timeless(events []provider.Event) []provider.Event {
	out := make([]provider.Event, len(events))
	for i, e := range events {
		e.TimestampMs = 0
		out[i] = e
	}
	return out
}

// streamInfo returns the instance's stored metadata without its times.
func streamInfo(t *testing.T, p *adapter.Provider, instance string) eventstore.StreamInfo {
	t.Helper()
	info, err := p.Store().Stream(t.Context(), instance)
	if err != nil {
		t.Fatal(err)
	}
	info.CreatedAt, info.UpdatedAt = time.Time{}, time.Time{}
	if !info.CompletedAt.IsZero() {
		info.CompletedAt = time.Unix(1, 0)
	}
	return info
}
