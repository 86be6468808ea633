package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/duroq/duroq"

// allowed lists, per package, the non-standard imports it may have (by prefix).
var allowed = map[string][]string{
	"txn": {},
	"mq": {"txn", "internal/wake", "internal/tracectx", "internal/limits", "github.com/google/uuid", // and OpenTelemetry's API, never its SDK:
		"go.opentelemetry.io/otel/trace", "go.opentelemetry.io/otel/metric", "go.opentelemetry.io/otel/attribute", "go.opentelemetry.io/otel/codes"},
	"eventstore": {"txn"},
	"runtime": {"runtime/provider", "internal/tracectx", // OpenTelemetry's API only, never its SDK:
		"go.opentelemetry.io/otel/trace", "go.opentelemetry.io/otel/metric", "go.opentelemetry.io/otel/attribute", "go.opentelemetry.io/otel/codes"},
	"runtime/provider":                   {"github.com/vmihailenco/msgpack/v5"},
	"runtime/faultprovider":              {"runtime/provider", "runtime"},
	"runtime/runtimetest":                {"runtime/provider", "runtime", "adapter"},
	"conformance":                        {"runtime/provider", "mq", "eventstore", "runtime", "runtime/faultprovider", "txn", "go.opentelemetry.io/otel/trace"},
	"bench":                              {"runtime/provider", "mq", "eventstore", "runtime"},
	"ui":                                 {"runtime/provider", "mq", "runtime", "schedule", "internal/tracectx"},
	"schedule":                           {"mq", "txn", "github.com/robfig/cron/v3"},
	"mq/sqlite":                          {"mq", "txn", "internal/", "sqlitedb", "github.com/jmoiron/sqlx", "github.com/mattn/go-sqlite3"},
	"eventstore/sqlite":                  {"eventstore", "eventstore/sqlstore", "txn", "internal/", "sqlitedb", "github.com/jmoiron/sqlx", "github.com/mattn/go-sqlite3"},
	"mq/postgres":                        {"mq", "txn", "internal/", "pgdb", "github.com/google/uuid", "github.com/jmoiron/sqlx", "github.com/jackc/pgx/v5"},
	"eventstore/postgres":                {"eventstore", "eventstore/sqlstore", "txn", "internal/", "pgdb", "github.com/jmoiron/sqlx", "github.com/jackc/pgx/v5"},
	"eventstore/sqlstore":                {"eventstore", "txn", "internal/sqltext", "internal/sqltx", "github.com/jmoiron/sqlx"},
	"internal/estest":                    {"eventstore", "internal/migrate", "internal/sqltx", "github.com/jmoiron/sqlx"},
	"internal/fill":                      {"eventstore", "txn", "runtime/provider", "runtime"},
	"internal/mqsql":                     {"mq", "txn", "internal/sqltx", "internal/limits", "github.com/google/uuid", "github.com/jmoiron/sqlx"},
	"internal/mqtest":                    {"mq", "internal/sqltx", "github.com/google/uuid", "github.com/jmoiron/sqlx"},
	"internal/sqltx":                     {"txn", "github.com/jmoiron/sqlx"},
	"internal/sqliteconn":                {"txn", "internal/sqltx", "github.com/jmoiron/sqlx", "github.com/mattn/go-sqlite3", "github.com/fsnotify/fsnotify"},
	"internal/pgsql":                     {"txn", "internal/sqltx", "internal/migrate", "github.com/jmoiron/sqlx", "github.com/jackc/pgx/v5"},
	"internal/pgtest":                    {"internal/testenv", "github.com/jackc/pgx/v5"},
	"internal/testenv":                   {},
	"internal/stmtcache":                 {"github.com/jmoiron/sqlx"},
	"internal/groupcommit":               {},
	"internal/migrate":                   {},
	"internal/sqltext":                   {},
	"internal/wake":                      {},
	"internal/limits":                    {},
	"internal/tracectx":                  {"go.opentelemetry.io/otel/trace", "go.opentelemetry.io/otel/propagation"},
	"internal/layering":                  {},
	"internal/sqliteconn/sqliteconntest": {"internal/sqliteconn", "github.com/jmoiron/sqlx", "github.com/mattn/go-sqlite3"},
	"internal/processtest":               {"mq", "mq/sqlite", "mq/postgres", "internal/pgtest", "pgdb"},
	// The adapter composes through the contracts (mq.TxQueue, eventstore.TxStore,
	// txn) and links no database driver (internal/wake: the watches of its
	// instance feed).
	"adapter":        {"runtime/provider", "mq", "eventstore", "runtime", "txn", "internal/sqltx", "internal/wake"},
	"sqlitedb":       {"internal/sqliteconn", "github.com/jmoiron/sqlx"},
	"pgdb":           {"internal/pgsql", "github.com/jmoiron/sqlx", "github.com/jackc/pgx/v5"},
	"sqliteprovider": {"adapter", "mq/sqlite", "eventstore/sqlite", "sqlitedb"},
	"pgprovider":     {"adapter", "mq/postgres", "eventstore/postgres", "pgdb"},
	"cmd/duroq": {"adapter", "bench", "ui", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters/stdout", "go.opentelemetry.io/otel/exporters/otlp", "go.opentelemetry.io/otel/semconv", "go.opentelemetry.io/otel/trace", "mq", "mq/sqlite", "mq/postgres", "eventstore/sqlite", "eventstore/postgres", "runtime", "runtime/provider", "runtime/runtimetest",
		"sqlitedb", "pgdb", "sqliteprovider", "pgprovider", "schedule", "internal/migrate", "internal/pgsql", "github.com/jackc/pgx/v5", "github.com/mattn/go-sqlite3"},
}

func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		rules, ok := allowed[pkg]
		if !ok {
			t.Errorf("package %s has no rule: add what it may import to allowed", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
				continue // standard library
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			ok := false
			for _, prefix := range rules {
				if rel == prefix || strings.HasPrefix(rel, prefix) && (strings.HasSuffix(prefix, "/") || !strings.HasPrefix(imp, module)) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s imports %s, which its layer may not (allowed: %v)", pkg, imp, rules)
			}
		}
	}
}
