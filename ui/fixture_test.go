package ui_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/sqliteprovider"
	"github.com/duroq/duroq/ui"
)

// backends open a fresh provider per test on each backend.
var backends = []struct {
	name string
	open func(t *testing.T) *adapter.Provider
}{
	{"memory", func(t *testing.T) *adapter.Provider { return adapter.NewMemory(adapter.Options{}) }},
	{"sqlite", func(t *testing.T) *adapter.Provider {
		p, err := sqliteprovider.Open(filepath.Join(t.TempDir(), "ui.db"), sqliteprovider.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}},
	{"postgres", func(t *testing.T) *adapter.Provider {
		dsn, schema := pgtest.Schema(t)
		p, err := pgprovider.Open(t.Context(), dsn, pgprovider.Options{DB: pgdb.Options{Schema: schema, MaxOpenConns: 8}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}},
}

// fixture is a provider filled with instances in every state and a queue with
// dead letters, a runtime running them, and the UI over it all.
type fixture struct {
	p      *adapter.Provider
	client *runtime.Client
	srv    *httptest.Server
	url    string // the UI's root, without a trailing slash
}

// The fixture's instances.
const (
	completedID = "order-1"    // Order: completed, with KV, custom status and a child
	failedID    = "broken-1"   // Broken: failed by its activity
	raiseID     = "approval-1" // Approval: waits for the event "approve"
	cancelID    = "approval-2" // Approval: waits, to be cancelled
	parentID    = "parent-1"   // Parent: waits for its running child
	childID     = "parent-1-child"
	stuckID     = "stuck-1" // Unregistered: no runtime has its code, its start stays queued
)

// The fixture's queue: "orders" with keys ann and bob, and carol's poison message
// dead-lettered to "orders.dead" with deadReason.
const deadReason = "bad total: -5"

func registry() *runtime.Registry {
	reg := runtime.NewRegistry()
	_ = reg.RegisterActivity("Charge", func(_ *runtime.ActivityContext, in string) (string, error) { return "charged " + in, nil })
	_ = reg.RegisterActivity("Explode", func(_ *runtime.ActivityContext, in string) (string, error) {
		return "", errors.New("card declined for " + in)
	})
	_ = reg.RegisterOrchestration("Order", func(ctx *runtime.Context, in string) (string, error) {
		ctx.SetKV("customer", in)
		ctx.SetCustomStatus("charging")
		charged, err := ctx.ScheduleActivity("Charge", in).Get()
		if err != nil {
			return "", err
		}
		shipped, err := ctx.ScheduleSubOrchestration("Ship", in).Get()
		ctx.SetCustomStatus("shipped")
		return charged + ", " + shipped, err
	})
	_ = reg.RegisterOrchestration("Ship", func(ctx *runtime.Context, in string) (string, error) { return "shipped to " + in, nil })
	_ = reg.RegisterOrchestration("Broken", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleActivity("Explode", in).Get()
	})
	_ = reg.RegisterOrchestration("Approval", func(ctx *runtime.Context, in string) (string, error) {
		ctx.SetCustomStatus("waiting for approval")
		data, err := ctx.WaitForEvent("approve").Get()
		return "approved: " + data, err
	})
	_ = reg.RegisterOrchestration("Parent", func(ctx *runtime.Context, in string) (string, error) {
		return ctx.ScheduleSubOrchestration("Approval", in, runtime.WithInstanceID(childID)).Get()
	})
	return reg
}

// newFixture fills p, runs a runtime on it until the test ends and serves the UI
// with o (its Provider and Queues set to p's).
func newFixture(t *testing.T, p *adapter.Provider, o ui.Options) *fixture {
	t.Helper()
	rt, err := runtime.New(p, registry(), runtime.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-ran
		p.Close()
	})
	f := &fixture{p: p, client: rt.Client()}
	wait, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	for _, s := range [][3]string{{completedID, "Order", "ann"}, {"order-2", "Order", "bob"}, {"order-3", "Order", "carol"},
		{failedID, "Broken", "dave"}, {raiseID, "Approval", "eve"}, {cancelID, "Approval", "frank"}, {parentID, "Parent", "gina"}, {stuckID, "Unregistered", "hal"}} {
		if err := f.client.StartOrchestration(wait, s[0], s[1], s[2]); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{completedID, "order-2", "order-3", failedID} {
		if _, err := f.client.WaitForOrchestration(wait, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{raiseID, cancelID, childID} {
		if _, err := f.client.WaitForStatusChange(wait, id, 0); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	fillQueue(t, p.Queue())
	o.Provider, o.Queues = p, p.Queue()
	h, err := ui.New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	f.url = f.srv.URL
	return f
}

// fillQueue enqueues carol's poison message and dead-letters it, then ann's and
// bob's messages.
func fillQueue(t *testing.T, q mq.MessageQueue) {
	t.Helper()
	ctx := t.Context()
	if err := q.Enqueue(ctx, mq.Message{Queue: "orders", RoutingKey: "carol", Payload: []byte(`{"total":-5}`)}); err != nil {
		t.Fatal(err)
	}
	b, err := q.DequeueBatch(ctx, "orders", mq.DequeueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Settle(ctx, mq.Settlement{Token: b.Token, DeadLettered: 1, DeadLetterQueue: "orders.dead", Reason: deadReason}); err != nil {
		t.Fatal(err)
	}
	var msgs []mq.Message
	for _, m := range [][2]string{{"ann", "ann's first"}, {"ann", "ann's second"}, {"bob", "bob's only"}, {"ann", "ann's third"}} {
		msgs = append(msgs, mq.Message{Queue: "orders", RoutingKey: m[0], Payload: []byte(m[1])})
	}
	msgs = append(msgs, mq.Message{Queue: "orders", RoutingKey: "dan", Payload: []byte{0xff, 0xfe, 0x00}, Delay: time.Hour})
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// noRedirects is a client that returns redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
