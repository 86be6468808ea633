package adapter_test

import (
	"path/filepath"
	"testing"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/bench"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/sqlitedb"
	"github.com/duroq/duroq/sqliteprovider"
)

func benchSQLite(b *testing.B) provider.Provider {
	p, err := openSQLite(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func benchSQLiteFull(b *testing.B) provider.Provider {
	p, err := sqliteprovider.Open(filepath.Join(b.TempDir(), "bench.db"), sqliteprovider.Options{DB: sqlitedb.Options{Synchronous: "FULL"}})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func benchPostgres(b *testing.B) provider.Provider {
	dsn, schema := pgtest.Schema(b)
	p, err := openPostgres(schema + " " + dsn)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func benchMemory(*testing.B) provider.Provider { return adapter.NewMemory(adapter.Options{}) }

// BenchmarkRuntime* run the end-to-end workloads (SQLite: a file in WAL mode,
// synchronous=NORMAL).
func BenchmarkRuntimeMemory(b *testing.B)   { bench.Runtime(b, benchMemory) }
func BenchmarkRuntimeSQLite(b *testing.B)   { bench.Runtime(b, benchSQLite) }
func BenchmarkRuntimePostgres(b *testing.B) { bench.Runtime(b, benchPostgres) }

// BenchmarkProvider* measure the provider contract alone.
func BenchmarkProviderMemory(b *testing.B)     { bench.Provider(b, benchMemory) }
func BenchmarkProviderSQLite(b *testing.B)     { bench.Provider(b, benchSQLite) }
func BenchmarkProviderSQLiteFull(b *testing.B) { bench.Provider(b, benchSQLiteFull) }
func BenchmarkProviderPostgres(b *testing.B)   { bench.Provider(b, benchPostgres) }
