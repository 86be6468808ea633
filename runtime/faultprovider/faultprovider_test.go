package faultprovider_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime/faultprovider"
	"github.com/duroq/duroq/runtime/provider"
)

// memory is a provider with every optional interface.
func memory(t *testing.T) *adapter.Provider {
	t.Helper()
	p := adapter.NewMemory(adapter.Options{})
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func inject(t *testing.T, p provider.Provider, opts faultprovider.Options) *faultprovider.Injector {
	t.Helper()
	f, err := faultprovider.New(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// start is a start message for instance.
func start(instance string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: instance, ExecutionID: provider.InitialExecutionID, Name: "O"}
}

// queued fetches, from p itself, the instance whose start is queued ("" when none).
func queued(t *testing.T, p provider.Provider) string {
	t.Helper()
	item, err := p.FetchOrchestrationItem(context.Background(), provider.FetchOptions{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if item == nil {
		return ""
	}
	return item.Instance
}

// injected asserts that err is an injected retryable fault of op.
func injected(t *testing.T, err error, op faultprovider.Op) {
	t.Helper()
	var pe *provider.ProviderError
	if !errors.Is(err, faultprovider.ErrInjected) || !provider.IsRetryable(err) || !errors.As(err, &pe) || pe.Op != string(op) {
		t.Fatalf("error %v, want a retryable injected fault of %s", err, op)
	}
}

// capabilities lists the batch and management interfaces p implements.
func capabilities(p provider.Provider) [2]bool {
	_, b := p.(provider.BatchProvider)
	_, m := p.(provider.ManagedProvider)
	return [2]bool{b, m}
}

// batchManaged is a provider with both batching and management, nothing else.
type batchManaged interface {
	provider.BatchProvider
	provider.ManagedProvider
}

// The wrapper keeps the batch and management capabilities of the wrapped provider,
// and always reads pending starts and keeps abandon reasons, falling back to what a
// provider without them does.
func TestWrapperHasTheCapabilitiesOfTheWrappedProvider(t *testing.T) {
	mem := memory(t)
	for name, inner := range map[string]provider.Provider{
		"none":          struct{ provider.Provider }{mem},
		"batch":         struct{ provider.BatchProvider }{mem},
		"managed":       struct{ provider.ManagedProvider }{mem},
		"batch+managed": struct{ batchManaged }{mem},
		"all":           mem,
	} {
		p := inject(t, inner, faultprovider.Options{}).Provider()
		if got, want := capabilities(p), capabilities(inner); got != want {
			t.Errorf("%s: wrapper has [batch managed] = %v, want %v", name, got, want)
		}
		if _, ok := p.(provider.PendingStartReader); !ok {
			t.Errorf("%s: wrapper reads no pending starts", name)
		}
		if _, ok := p.(provider.ReasonAbandoner); !ok {
			t.Errorf("%s: wrapper keeps no abandon reasons", name)
		}
	}
	ctx := context.Background()
	plain := inject(t, struct{ provider.Provider }{mem}, faultprovider.Options{}).Provider()
	if err := plain.EnqueueForOrchestrator(ctx, start("p"), 0); err != nil {
		t.Fatal(err)
	}
	if ps, err := plain.(provider.PendingStartReader).PendingStart(ctx, "p"); ps != nil || err != nil {
		t.Fatalf("PendingStart over a provider without it = %+v, %v; want none", ps, err)
	}
	if ps, err := inject(t, mem, faultprovider.Options{}).Provider().(provider.PendingStartReader).PendingStart(ctx, "p"); ps == nil || err != nil {
		t.Fatalf("PendingStart over the memory provider = %+v, %v; want the queued start", ps, err)
	}
}

func TestFailureDoesNotReachTheWrappedProvider(t *testing.T) {
	mem := memory(t)
	f := inject(t, mem, faultprovider.Options{Seed: 1, Rate: 1})
	err := f.Provider().EnqueueForOrchestrator(context.Background(), start("a"), 0)
	injected(t, err, faultprovider.OpEnqueueForOrchestrator)
	if strings.Contains(err.Error(), "reply lost") {
		t.Fatalf("a failure reads as a lost reply: %v", err)
	}
	if got := queued(t, mem); got != "" {
		t.Fatalf("the failed enqueue reached the provider: %q is queued", got)
	}
	if c := f.Counts()[faultprovider.OpEnqueueForOrchestrator]; c != (faultprovider.Counts{Calls: 1, Failed: 1}) {
		t.Fatalf("counts %+v, want one call, one failure", c)
	}
}

func TestLostReplyAppliesTheWrite(t *testing.T) {
	mem := memory(t)
	f := inject(t, mem, faultprovider.Options{Seed: 1, Rate: 1, LostReply: 1})
	p := f.Provider()
	err := p.EnqueueForOrchestrator(context.Background(), start("a"), 0)
	injected(t, err, faultprovider.OpEnqueueForOrchestrator)
	if !strings.Contains(err.Error(), "reply lost") {
		t.Fatalf("a lost reply does not say so: %v", err)
	}
	if got := queued(t, mem); got != "a" {
		t.Fatalf("queued %q after a lost reply, want the enqueue applied", got)
	}
	// A write the wrapped provider refuses returns its own error, and no fault is counted.
	if err := p.AckWorkItem(context.Background(), "no-such-token", nil); err == nil || errors.Is(err, faultprovider.ErrInjected) {
		t.Fatalf("ack of an unknown token = %v, want the provider's own error", err)
	}
	// Reads have no reply to lose: they fail.
	_, err = p.Read(context.Background(), "a")
	injected(t, err, faultprovider.OpRead)
	counts := f.Counts()
	for op, want := range map[faultprovider.Op]faultprovider.Counts{
		faultprovider.OpEnqueueForOrchestrator: {Calls: 1, LostReplies: 1},
		faultprovider.OpAckWorkItem:            {Calls: 1},
		faultprovider.OpRead:                   {Calls: 1, Failed: 1},
	} {
		if counts[op] != want {
			t.Errorf("%s counts %+v, want %+v", op, counts[op], want)
		}
	}
}

func TestOpsSelectWhatFails(t *testing.T) {
	f := inject(t, memory(t), faultprovider.Options{Seed: 1, Rate: 1, Ops: map[faultprovider.Op]float64{
		faultprovider.OpFetchWorkItems: 1, faultprovider.OpAbandonOrchestrationItem: 1}})
	p := f.Provider()
	ctx := context.Background()
	if _, err := p.Read(ctx, "a"); err != nil {
		t.Fatalf("read, not listed in Ops, failed: %v", err)
	}
	_, err := p.(provider.BatchProvider).FetchWorkItems(ctx, provider.WorkFetchOptions{LockTimeout: time.Second}, 4)
	injected(t, err, faultprovider.OpFetchWorkItems)
	err = p.(provider.ReasonAbandoner).AbandonOrchestrationItemWithReason(ctx, "token", 0, false, "why")
	injected(t, err, faultprovider.OpAbandonOrchestrationItem)
	// Management is never faulted.
	if _, err := p.(provider.ManagedProvider).Management().ListInstances(ctx); err != nil {
		t.Fatalf("management call failed: %v", err)
	}
}

func TestNewRefusesBadArguments(t *testing.T) {
	if _, err := faultprovider.New(nil, faultprovider.Options{}); err == nil {
		t.Error("New accepted a nil provider")
	}
	_, err := faultprovider.New(memory(t), faultprovider.Options{Ops: map[faultprovider.Op]float64{"fetch_everything": 1}})
	if err == nil || !strings.Contains(err.Error(), "fetch_everything") {
		t.Errorf("New with an unknown operation = %v, want an error naming it", err)
	}
}

// readFaults records which of n Read calls of f failed, making a GetInstanceStats
// call between reads when interleave is set.
func readFaults(t *testing.T, f *faultprovider.Injector, n int, interleave bool) []bool {
	t.Helper()
	out := make([]bool, n)
	for i := range out {
		_, err := f.Provider().Read(context.Background(), "a")
		out[i] = err != nil
		if interleave {
			_, _ = f.Provider().GetInstanceStats(context.Background(), "a")
		}
	}
	return out
}

func TestSeedFixesEachOperationsFaults(t *testing.T) {
	const n, rate = 2000, 0.3
	opts := faultprovider.Options{Seed: 7, Rate: rate}
	a := readFaults(t, inject(t, memory(t), opts), n, false)
	// Calls of other operations do not shift an operation's sequence.
	b := readFaults(t, inject(t, memory(t), opts), n, true)
	opts.Seed = 8
	c := readFaults(t, inject(t, memory(t), opts), n, false)
	failed, differ := 0, 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("read %d failed=%v in one run and %v in another with the same seed", i, a[i], b[i])
		}
		if a[i] {
			failed++
		}
		if a[i] != c[i] {
			differ++
		}
	}
	// Binomial(2000, 0.3) has a standard deviation of about 20: ±100 cannot fail by chance.
	if failed < n*rate-100 || failed > n*rate+100 {
		t.Errorf("%d of %d reads failed at rate %v", failed, n, rate)
	}
	if differ < n/10 {
		t.Errorf("seeds 7 and 8 differ on only %d of %d reads", differ, n)
	}
}

func TestLostReplyShareSplitsWriteFaults(t *testing.T) {
	const n = 2000
	f := inject(t, memory(t), faultprovider.Options{Seed: 3, Rate: 0.5, LostReply: 0.25})
	for i := range n {
		_ = f.Provider().EnqueueForWorker(context.Background(), provider.WorkItem{Kind: provider.WorkActivityExecute,
			Instance: "a", ExecutionID: 1, ID: uint64(i + 1), Name: "A"})
	}
	c := f.Counts()[faultprovider.OpEnqueueForWorker]
	faults := c.Failed + c.LostReplies
	// Expected: 1000 faults, 250 of them lost replies (standard deviations ~22 and ~19).
	if c.Calls != n || faults < 900 || faults > 1100 || c.LostReplies < 170 || c.LostReplies > 330 {
		t.Fatalf("counts %+v of %d enqueues at rate 0.5, lost-reply share 0.25", c, n)
	}
}
