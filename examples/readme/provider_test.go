package readme_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/sqliteprovider"
)

// The provider (README): an orchestration driven by hand through the contract the
// runtime's dispatchers use. Each turn takes the instance locked with its messages
// and history, and commits what the code decided — history, activities to run,
// metadata — with the ack of exactly those messages, in one transaction.
func Example_provider() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	p, err := sqliteprovider.Open(filepath.Join(dir, "app.db"), sqliteprovider.Options{}) // queue + event store in one file
	if err != nil {
		panic(err)
	}
	defer p.Close()
	// What Client.StartOrchestration does: a message on the instance's routing key.
	err = p.EnqueueForOrchestrator(ctx, provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: "order-42",
		ExecutionID: provider.InitialExecutionID, Name: "Checkout", Input: "42"}, 0)
	if err != nil {
		panic(err)
	}

	item, err := p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	events := []provider.Event{{Kind: provider.EventOrchestrationStarted, EventID: 1, Name: "Checkout", Input: "42"},
		{Kind: provider.EventActivityScheduled, EventID: 2, Name: "Charge", Input: "42"}}
	activities := []provider.WorkItem{{Kind: provider.WorkActivityExecute, Instance: "order-42", ExecutionID: 1, ID: 2,
		Name: "Charge", Input: "42"}}
	err = p.AckOrchestrationItem(ctx, item.LockToken, provider.OrchestrationAck{ExecutionID: 1, HistoryDelta: events,
		WorkerItems: activities, Metadata: provider.ExecutionMetadata{OrchestrationName: &item.OrchestrationName}})
	if err != nil {
		panic(err)
	}
	fmt.Println("turn 1:", item.Messages[0].Kind, "->", events[1].Kind, events[1].Name)

	// A worker runs the activity; its ack enqueues the completion for the instance.
	lease, err := p.FetchWorkItem(ctx, provider.WorkFetchOptions{LockTimeout: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	err = p.AckWorkItem(ctx, lease.LockToken, &provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: "order-42",
		ExecutionID: 1, ID: lease.Item.ID, Result: "receipt-42"})
	if err != nil {
		panic(err)
	}

	// The next turn sees the completion and ends the execution.
	item, err = p.FetchOrchestrationItem(ctx, provider.FetchOptions{LockTimeout: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	completed, output := provider.StatusCompleted, item.Messages[0].Result
	err = p.AckOrchestrationItem(ctx, item.LockToken, provider.OrchestrationAck{ExecutionID: 1, HistoryDelta: []provider.Event{
		{Kind: provider.EventActivityCompleted, EventID: 3, SourceEventID: 2, Result: output},
		{Kind: provider.EventOrchestrationCompleted, EventID: 4, Output: output}},
		Metadata: provider.ExecutionMetadata{Status: &completed, Output: &output}})
	if err != nil {
		panic(err)
	}
	fmt.Println("turn 2:", item.Messages[0].Kind, "with", len(item.History), "events of history")

	status, err := runtime.NewClient(p).Status(ctx, "order-42")
	fmt.Println(status.Name, status.State, status.Output, err)
	// Output:
	// turn 1: StartOrchestration -> ActivityScheduled Charge
	// turn 2: ActivityCompleted with 2 events of history
	// Checkout Completed receipt-42 <nil>
}

// openShared is the README's PostgreSQL block: the provider every process of a
// deployment opens on one schema to share the work. TestOpenSharedPostgres runs it.
func openShared(ctx context.Context, dsn, schema string) (*adapter.Provider, error) {
	p, err := pgprovider.Open(ctx, dsn, // dsn: e.g. "postgres://user@db-host:5432/app"
		pgprovider.Options{DB: pgdb.Options{Schema: schema}}) // schema: e.g. "duroq"
	return p, err
}

// Two providers opened by openShared on one schema, as two processes would: an
// orchestration started through one runs on a runtime over the other.
func TestOpenSharedPostgres(t *testing.T) {
	dsn, schema := freshSchema(t)
	starter, err := openShared(t.Context(), dsn, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer starter.Close()
	worker, err := openShared(t.Context(), dsn, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	reg := runtime.NewRegistry()
	if err := reg.RegisterOrchestration("Echo", func(_ *runtime.Context, in string) (string, error) { return in, nil }); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(worker, reg, runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	client := runtime.NewClient(starter)
	if err := client.StartOrchestration(ctx, "echo-1", "Echo", "hello"); err != nil {
		t.Fatal(err)
	}
	st, err := client.WaitForOrchestration(ctx, "echo-1")
	if err != nil || st.State != runtime.StateCompleted || st.Output != "hello" {
		t.Fatalf("echo-1 through the shared schema: %+v, %v", st, err)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// freshSchema creates a schema of a random name on the server named by
// DUROQ_POSTGRES_DSN, dropped with everything in it when t ends, so runs never see
// each other's tables; without the variable it skips t.
func freshSchema(t *testing.T) (dsn, schema string) {
	t.Helper()
	dsn = os.Getenv("DUROQ_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("PostgreSQL tests skipped: set DUROQ_POSTGRES_DSN (for example postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run them")
	}
	schema = "readme_" + strings.ToLower(rand.Text())
	ident := pgx.Identifier{schema}.Sanitize()
	exec := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(t.Context(), "CREATE SCHEMA "+ident); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		// t.Context is done by now: the drop gets a context of its own.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := exec(ctx, "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return dsn, schema
}
