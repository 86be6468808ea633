package adapter_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/fill"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/sqliteprovider"
)

// BenchmarkListInstancePage reads pages of 100 instances (the management API's
// listing, as an operator's web UI does) from stores of 1,000 and 100,000
// instances that internal/fill wrote: the first page, a page in the middle of the
// listing (After), the running instances and the instances of one orchestration.
// A page must cost the same at both sizes. SQLite runs on a file; PostgreSQL when
// DUROQ_POSTGRES_DSN is set. Filling 100,000 instances takes about 6 s on SQLite
// and 13 s on PostgreSQL (2 cores), so both sizes run even at -benchtime=1x; -v
// logs each fill's time.
func BenchmarkListInstancePage(b *testing.B) {
	for _, backend := range []struct {
		name string
		open func(b *testing.B) *adapter.Provider
	}{
		{"SQLite", func(b *testing.B) *adapter.Provider {
			p, err := sqliteprovider.Open(filepath.Join(b.TempDir(), "list.db"), sqliteprovider.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return p
		}},
		{"Postgres", func(b *testing.B) *adapter.Provider {
			dsn, schema := pgtest.Schema(b)
			p, err := pgprovider.Open(b.Context(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema}})
			if err != nil {
				b.Fatal(err)
			}
			return p
		}},
	} {
		b.Run(backend.name, func(b *testing.B) {
			for _, n := range []int{1000, 100000} {
				b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
					p := backend.open(b)
					b.Cleanup(func() { p.Close() })
					start := time.Now()
					if err := fill.Instances(b.Context(), p.Store().(eventstore.TxStore), n, fill.Options{}); err != nil {
						b.Fatal(err)
					}
					b.Logf("filled %d instances in %v", n, time.Since(start).Round(time.Millisecond))
					for _, q := range []struct {
						name string
						q    provider.InstanceQuery
					}{
						{"first", provider.InstanceQuery{}},
						{"middle", provider.InstanceQuery{After: fill.ID("fill-", n/2)}},
						{"running", provider.InstanceQuery{Status: provider.StatusRunning}},
						{"name", provider.InstanceQuery{Orchestration: fill.Names[1]}},
					} {
						b.Run(q.name, func(b *testing.B) {
							for b.Loop() {
								page, err := p.ListInstancePage(b.Context(), q.q)
								if err != nil {
									b.Fatal(err)
								}
								if len(page.Instances) != provider.DefaultPageSize {
									b.Fatalf("a page of %d instances; want %d", len(page.Instances), provider.DefaultPageSize)
								}
							}
						})
					}
				})
			}
		})
	}
}
