package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/eventstore"
	essqlite "github.com/duroq/duroq/eventstore/sqlite"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/sqliteprovider"
)

// factory wires the provider suite's hooks through the primitives.
func factory(open func(t *testing.T) *adapter.Provider) conformance.ProviderFactory {
	return conformance.ProviderFactory{
		New:         func(t *testing.T) provider.Provider { return open(t) },
		LongPolling: true,
		// Appending an event the runtime cannot decode makes the current execution's
		// history undecodable, the way a damaged row or a foreign writer would.
		CorruptInstanceHistory: func(t *testing.T, p provider.Provider, instance string) {
			s := p.(*adapter.Provider).Store()
			partition, err := s.LatestPartition(t.Context(), instance)
			if err != nil {
				t.Fatalf("corrupt %s: %v", instance, err)
			}
			if err := s.Append(t.Context(), instance, partition, []eventstore.Event{{Seq: 1 << 40, Type: "Garbage", Data: []byte{0xff, 0x00}}}); err != nil {
				t.Fatalf("corrupt %s: %v", instance, err)
			}
		},
		MaxAttemptCount: func(t *testing.T, p provider.Provider, instance string) uint32 {
			st, err := p.(*adapter.Provider).Queue().KeyStats(t.Context(), "orchestrator", instance)
			if err != nil {
				t.Fatalf("max attempt count of %s: %v", instance, err)
			}
			return uint32(st.MaxAttempt)
		},
	}
}

func TestProviderMemory(t *testing.T) {
	conformance.TestProvider(t, factory(func(t *testing.T) *adapter.Provider { return adapter.NewMemory(adapter.Options{}) }))
}

func TestProviderSQLite(t *testing.T) {
	conformance.TestProvider(t, factory(func(t *testing.T) *adapter.Provider {
		p, err := sqliteprovider.Open(filepath.Join(t.TempDir(), "duroq.db"), sqliteprovider.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}))
}

func TestProviderPostgres(t *testing.T) {
	conformance.TestProvider(t, factory(func(t *testing.T) *adapter.Provider {
		dsn, schema := pgtest.Schema(t)
		p, err := pgprovider.Open(t.Context(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 8}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}))
}

// pair is the queue and store of the provider open makes, for TestTransactional.
func pair(open func(t *testing.T) *adapter.Provider) conformance.TxPairFactory {
	return conformance.TxPairFactory{New: func(t *testing.T) (mq.TxQueue, eventstore.TxStore) {
		p := open(t)
		t.Cleanup(func() { p.Close() })
		return p.Queue().(mq.TxQueue), p.Store().(eventstore.TxStore)
	}}
}

func TestTransactionalMemory(t *testing.T) {
	conformance.TestTransactional(t, pair(func(t *testing.T) *adapter.Provider { return adapter.NewMemory(adapter.Options{}) }))
}

func TestTransactionalSQLite(t *testing.T) {
	conformance.TestTransactional(t, pair(func(t *testing.T) *adapter.Provider {
		p, err := openSQLite(filepath.Join(t.TempDir(), "duroq.db"))
		if err != nil {
			t.Fatal(err)
		}
		return p.(*adapter.Provider)
	}))
}

func TestTransactionalPostgres(t *testing.T) {
	conformance.TestTransactional(t, pair(func(t *testing.T) *adapter.Provider {
		dsn, schema := pgtest.Schema(t)
		p, err := openPostgres(schema + " " + dsn)
		if err != nil {
			t.Fatal(err)
		}
		return p.(*adapter.Provider)
	}))
}

func TestNewRefusesPrimitivesThatCannotCommitTogether(t *testing.T) {
	store, err := essqlite.Open(filepath.Join(t.TempDir(), "store.db"), essqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for name, pair := range map[string]struct {
		q mq.MessageQueue
		s eventstore.EventStore
	}{
		"memory queue + SQLite store":      {mq.NewMemory(mq.MemoryOptions{}), store},
		"memory pair in different domains": {mq.NewMemory(mq.MemoryOptions{}), eventstore.NewMemory(eventstore.MemoryOptions{})},
	} {
		if _, err := adapter.New(pair.q, pair.s, adapter.Options{}); !errors.Is(err, adapter.ErrNotComposable) {
			t.Errorf("%s: New = %v, want ErrNotComposable", name, err)
		}
	}
}

func TestRuntimeMemory(t *testing.T) {
	conformance.TestRuntime(t, conformance.RuntimeFactory{
		New: func(t *testing.T) provider.Provider { return adapter.NewMemory(adapter.Options{}) },
	})
}

func openSQLite(location string) (provider.Provider, error) {
	return sqliteprovider.Open(location, sqliteprovider.Options{})
}

func TestRuntimeSQLite(t *testing.T) {
	conformance.TestRuntime(t, conformance.RuntimeFactory{
		New: func(t *testing.T) provider.Provider {
			p, err := openSQLite(filepath.Join(t.TempDir(), "duroq.db"))
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewStore: func(t *testing.T) string { return filepath.Join(t.TempDir(), "duroq.db") },
		Open:     openSQLite,
	})
}

// openPostgres opens a location of the form "schema dsn".
func openPostgres(location string) (provider.Provider, error) {
	schema, dsn, _ := strings.Cut(location, " ")
	return pgprovider.Open(context.Background(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 8}})
}

func TestRuntimePostgres(t *testing.T) {
	newStore := func(t *testing.T) string {
		dsn, schema := pgtest.Schema(t)
		return schema + " " + dsn
	}
	conformance.TestRuntime(t, conformance.RuntimeFactory{
		New: func(t *testing.T) provider.Provider {
			p, err := openPostgres(newStore(t))
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewStore: newStore,
		Open:     openPostgres,
	})
}

// WriteTransactions counts a group-committed start once per shared commit, not
// once per start: concurrent starts on SQLite add what the queue's Enqueue rounds
// add, and the memory queue, which counts no rounds, one per start.
func TestWriteTransactionsCountSharedStarts(t *testing.T) {
	rounds := func(p *adapter.Provider) int64 {
		if r, ok := p.Queue().(interface{ EnqueueRounds() int64 }); ok {
			return r.EnqueueRounds()
		}
		return -1
	}
	sqlite, err := sqliteprovider.Open(filepath.Join(t.TempDir(), "duroq.db"), sqliteprovider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sqlite.Close()
	for name, p := range map[string]*adapter.Provider{"sqlite": sqlite, "memory": adapter.NewMemory(adapter.Options{})} {
		t.Run(name, func(t *testing.T) {
			const starts = 32
			writes0, rounds0 := p.WriteTransactions(), rounds(p)
			var wg sync.WaitGroup
			for i := range starts {
				wg.Go(func() {
					item := provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: fmt.Sprintf("shared-%d", i),
						ExecutionID: provider.InitialExecutionID, Name: "O"}
					if err := p.StartInstance(t.Context(), item, provider.StartReturnExisting); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			got := p.WriteTransactions() - writes0
			want := uint64(starts)
			if rounds0 >= 0 {
				want = uint64(rounds(p) - rounds0)
			}
			if got != want {
				t.Errorf("%d concurrent starts counted %d write transactions, want %d", starts, got, want)
			}
		})
	}
}
