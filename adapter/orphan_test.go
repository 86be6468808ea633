package adapter_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/sqliteprovider"
)

// An event raised for an instance that is never started waits for it (a start may
// be racing behind), but not forever: once older than OrphanTTL it is dropped.
func TestOrphanMessagesAreDroppedAfterTheirTTL(t *testing.T) {
	for name, open := range map[string]func(adapter.Options) (provider.ManagedProvider, error){
		"memory": func(o adapter.Options) (provider.ManagedProvider, error) { return adapter.NewMemory(o), nil },
		"sqlite": func(o adapter.Options) (provider.ManagedProvider, error) {
			return sqliteprovider.Open(filepath.Join(t.TempDir(), "duroq.db"), sqliteprovider.Options{Options: o})
		},
	} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			now := time.Unix(1_700_000_000, 0)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
			p, err := open(adapter.Options{Now: clock, OrphanRetry: time.Second, OrphanTTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			if err := runtime.NewClient(p).RaiseEvent(ctx, "ghost", "approved", ""); err != nil {
				t.Fatal(err)
			}
			pending := func() uint64 {
				d, err := p.Management().GetQueueDepths(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return d.OrchestratorQueue
			}
			fetch := func() {
				item, err := p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: time.Minute})
				if err != nil || item != nil {
					t.Fatalf("fetch: %+v, %v; want no work", item, err)
				}
			}

			fetch() // not an instance yet: offered again after OrphanRetry
			if n := pending(); n != 1 {
				t.Fatalf("%d orchestrator messages after the first fetch, want the event kept", n)
			}
			advance(30 * time.Minute)
			fetch()
			if n := pending(); n != 1 {
				t.Fatalf("%d orchestrator messages within the TTL, want the event kept", n)
			}
			advance(31 * time.Minute)
			fetch()
			if n := pending(); n != 0 {
				t.Fatalf("%d orchestrator messages past the TTL, want the event dropped", n)
			}
		})
	}
}
