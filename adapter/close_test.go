package adapter_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	essqlite "github.com/duroq/duroq/eventstore/sqlite"
	"github.com/duroq/duroq/internal/sqliteconn/sqliteconntest"
	mqsqlite "github.com/duroq/duroq/mq/sqlite"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/sqliteprovider"
)

// runOrders runs a runtime over p with an orchestration "Order" that schedules one
// activity, starts n instances order-1…order-n and waits for order-1 to complete.
// stop cancels the runtime and waits, boundedly, for Run to return.
func runOrders(t *testing.T, p *adapter.Provider, n int) (stop func()) {
	t.Helper()
	reg := runtime.NewRegistry()
	if err := errors.Join(
		reg.RegisterActivity("Charge", func(_ *runtime.ActivityContext, order string) (string, error) { return "charged " + order, nil }),
		reg.RegisterOrchestration("Order", func(ctx *runtime.Context, order string) (string, error) {
			return ctx.ScheduleActivity("Charge", order).Get()
		})); err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(p, reg, runtime.Options{DrainTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	stop = func() {
		cancel()
		select {
		case <-ran:
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return 30s after its context ended")
		}
	}
	client := rt.Client()
	for i := 1; i <= n; i++ {
		if err := client.StartOrchestration(ctx, fmt.Sprintf("order-%d", i), "Order", fmt.Sprint(i)); err != nil {
			stop()
			t.Fatal(err)
		}
	}
	wait, done := context.WithTimeout(ctx, 30*time.Second)
	defer done()
	if st, err := client.WaitForOrchestration(wait, "order-1"); err != nil || st.State != runtime.StateCompleted {
		stop()
		t.Fatalf("order-1: %+v, %v", st, err)
	}
	return stop
}

// checkClosedFile checks that the provider's file at path was closed whole and that a
// copy of the file alone shows order-1 completed.
func checkClosedFile(t *testing.T, path string) {
	t.Helper()
	db := sqliteconntest.ClosedFile(t, path)
	copied, err := adapter.New(mqsqlite.New(db, mqsqlite.Options{}), essqlite.New(db, essqlite.Options{}), adapter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := runtime.NewClient(copied).Status(t.Context(), "order-1")
	if err != nil || st.State != runtime.StateCompleted || st.Output != `charged 1` {
		t.Fatalf("order-1 in the copy of the closed file: %+v, %v; want it completed with output \"charged 1\"", st, err)
	}
}

// Close of an SQLite provider returns once the database is closed: the WAL is
// checkpointed into the file and the side files are gone, so a copy of the file
// alone shows the final state. A second Close is harmless.
func TestSQLiteCloseLeavesEverythingInTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	p, err := sqliteprovider.Open(path, sqliteprovider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop := runOrders(t, p, 1)
	stop()
	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	checkClosedFile(t, path)
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// Close while the runtime is busy with a hundred orders returns, the runtime still
// stops, and the file is left whole.
func TestSQLiteCloseWhileTheRuntimeRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	p, err := sqliteprovider.Open(path, sqliteprovider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stop := runOrders(t, p, 100)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("close while the runtime runs: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("Close did not return in 30s while the runtime ran")
	}
	stop()
	checkClosedFile(t, path)
}
