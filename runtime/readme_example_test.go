package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
)

// The runtime in 30 seconds (README): a checkout charges, waits for an approval
// queued by the client (or gives up after a day), and ships in a
// sub-orchestration, on a SQLite file.
func Example_checkout() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	reg := runtime.NewRegistry()
	err = errors.Join(
		reg.RegisterActivity("Charge", func(ctx *runtime.ActivityContext, order string) (string, error) {
			return "receipt-" + order, nil // runs on a worker, at least once; ctx is cancelled if the orchestration gives up
		}),
		reg.RegisterOrchestration("Checkout", func(ctx *runtime.Context, order string) (string, error) {
			receipt, err := ctx.ScheduleActivity("Charge", order).Get()
			if err != nil {
				return "", err
			}
			// The approval waits in the instance's "approvals" queue until taken here,
			// however early it was sent (an event raised with RaiseEvent before
			// WaitForEvent runs would be dropped).
			approval := ctx.DequeueEvent("approvals")
			if ctx.Select(approval, ctx.CreateTimer(24*time.Hour)) == 1 { // durable timer; the loser is cancelled
				return "", errors.New("not approved in time")
			}
			return ctx.ScheduleSubOrchestration("Ship", receipt).Get()
		}),
		reg.RegisterOrchestration("Ship", func(ctx *runtime.Context, receipt string) (string, error) {
			return "shipped against " + receipt, nil
		}))
	if err != nil {
		panic(err)
	}

	p, err := adapter.OpenSQLite(filepath.Join(dir, "app.db"), adapter.SQLiteOptions{}) // or adapter.OpenPostgres / adapter.NewMemory
	if err != nil {
		panic(err)
	}
	defer p.Close() // returns once the file is closed, its WAL checkpointed into app.db
	rt, err := runtime.New(p, reg, runtime.Options{})
	if err != nil {
		panic(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }() // orchestration dispatchers + workers; cancel ctx to drain and stop

	client := rt.Client()
	if err := client.StartOrchestration(ctx, "order-42", "Checkout", "42"); err != nil { // idempotent per instance id
		panic(err)
	}
	if err := client.EnqueueEvent(ctx, "order-42", "approvals", "ok"); err != nil { // kept until dequeued
		panic(err)
	}
	status, err := client.WaitForOrchestration(ctx, "order-42") // Completed / Failed, output, custom status
	fmt.Println(status.State, status.Output, err)
	stop()
	fmt.Println("runtime stopped:", <-ran)
	// Output:
	// Completed shipped against receipt-42 <nil>
	// runtime stopped: <nil>
}

// Every Go block of README.md is a copy of code in an example test file of the
// module, so each compiles and runs: the blocks cannot drift from the API.
func TestREADMEGoBlocksAreExamples(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var examples [][]string
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if name := d.Name(); !d.IsDir() && strings.Contains(name, "example") && strings.HasSuffix(name, "_test.go") {
			src, err := os.ReadFile(path)
			examples = append(examples, trimmedLines(string(src)))
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for rest := string(readme); ; {
		_, after, found := strings.Cut(rest, "\n```go\n")
		if !found {
			break
		}
		block, after, _ := strings.Cut(after, "\n```\n")
		rest = after
		blocks++
		if !slices.ContainsFunc(examples, func(src []string) bool { return containsRun(src, trimmedLines(block)) }) {
			t.Errorf("README block %d is in no example test file (*example*_test.go); copy it from one:\n%s", blocks, block)
		}
	}
	if blocks == 0 {
		t.Fatal("README.md has no Go block: the test reads the wrong file")
	}
}

// trimmedLines splits s into lines without their indentation: README blocks are
// example code moved out of its function.
func trimmedLines(s string) []string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return lines
}

// containsRun reports whether run occurs in lines as consecutive lines.
func containsRun(lines, run []string) bool {
	for i := 0; i+len(run) <= len(lines); i++ {
		if slices.Equal(lines[i:i+len(run)], run) {
			return true
		}
	}
	return false
}
