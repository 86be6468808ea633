package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/sqliteprovider"
)

// The demo's order workflow: typed definitions shared by registration and calls.
type order struct {
	ID       string   `json:"id"`
	Customer string   `json:"customer"`
	Items    []string `json:"items"`
}

type shipment struct {
	Order string   `json:"order"`
	Items []string `json:"items"`
}

var (
	reserve      = runtime.NewActivity[string, string]("ReserveItem")
	chargeCard   = runtime.NewActivity[order, int]("ChargeCard")
	packItem     = runtime.NewActivity[string, string]("PackItem")
	notify       = runtime.NewActivity[string, string]("NotifyCustomer")
	processOrder = runtime.NewOrchestration[order, string]("ProcessOrder")
	shipOrder    = runtime.NewOrchestration[shipment, string]("ShipOrder")
)

// An order waits for an approval: an event raised while it waits (RaiseEvent), a
// message in its approvals queue (EnqueueEvent, kept until dequeued, however early it
// came) or, after approvalTimeout, none. It publishes statusAwaitingApproval while it
// waits, so that the driver raises the event only then: raised earlier, nobody waits
// for it and it is dropped.
const (
	statusAwaitingApproval = "awaiting approval"
	approvalEvent          = "approval"
	approvalQueue          = "approvals"
	approvalTimeout        = 2 * time.Second
	demoLockTimeout        = 2 * time.Second
)

// How an order was approved: the start of its output.
const (
	approvedByEvent   = "approved by the raised event"
	approvedByMessage = "approved by the queued message"
	autoApproved      = "auto-approved: no approval within 2s"
)

// approvalPlan is one way the driver approves orders, and how the orders it is
// dealt to should end up approved.
type approvalPlan struct {
	name, what, expect string
}

// approvalPlans are dealt to the orders in turn: order-001 gets the first.
var approvalPlans = []approvalPlan{
	{"raised while it waits (RaiseEvent)", "the event is raised once the order says it waits", approvedByEvent},
	{"queued before it waits (EnqueueEvent)", "the message is queued right after the start and kept until the order dequeues it", approvedByMessage},
	{"raised before it waits (RaiseEvent)", "the event is raised right after the start; nobody waits for it yet, so it is dropped", autoApproved},
}

func planOf(i int) approvalPlan { return approvalPlans[i%len(approvalPlans)] }

// demoRegistry registers the workflow. work is the simulated duration of each
// activity.
func demoRegistry(work time.Duration) (*runtime.Registry, error) {
	reg := runtime.NewRegistry()
	pause := func(ctx context.Context) error {
		select {
		case <-time.After(work):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := errors.Join(
		reserve.Register(reg, func(ctx *runtime.ActivityContext, item string) (string, error) {
			return "reserved " + item, pause(ctx)
		}),
		chargeCard.Register(reg, func(ctx *runtime.ActivityContext, o order) (int, error) {
			return 25 * len(o.Items), pause(ctx)
		}),
		packItem.Register(reg, func(ctx *runtime.ActivityContext, item string) (string, error) {
			return item, pause(ctx)
		}),
		notify.Register(reg, func(ctx *runtime.ActivityContext, msg string) (string, error) {
			return "sent", pause(ctx)
		}),
		// ShipOrder packs every item in parallel (fan-out/fan-in) in a sub-orchestration.
		shipOrder.Register(reg, func(ctx *runtime.Context, s shipment) (string, error) {
			var packed []runtime.TypedFuture[string]
			for _, item := range s.Items {
				packed = append(packed, packItem.Schedule(ctx, item))
			}
			var items []string
			for _, f := range packed {
				item, err := f.Get()
				if err != nil {
					return "", err
				}
				items = append(items, item)
			}
			return fmt.Sprintf("%d parcels", len(items)), nil
		}),
		processOrder.Register(reg, processOrderFlow),
	)
	return reg, err
}

// processOrderFlow: reserve every item (fan-out/fan-in), charge, wait for an approval
// (a raised event or a queued message) or a timeout (durable timer), ship in a
// sub-orchestration, cool off (durable timer), notify.
func processOrderFlow(ctx *runtime.Context, o order) (string, error) {
	ctx.SetCustomStatus("reserving")
	var reservations []runtime.TypedFuture[string]
	for _, item := range o.Items {
		reservations = append(reservations, reserve.Schedule(ctx, item))
	}
	for _, r := range reservations {
		if _, err := r.Get(); err != nil {
			return "", err
		}
	}
	amount, err := chargeCard.Schedule(ctx, o).Get()
	if err != nil {
		return "", err
	}
	ctx.SetCustomStatus(statusAwaitingApproval)
	raised := ctx.WaitForEvent(approvalEvent)
	queued := ctx.DequeueEvent(approvalQueue)
	how := autoApproved
	switch ctx.Select(raised, queued, ctx.CreateTimer(approvalTimeout)) {
	case 0:
		how = approvedByEvent
	case 1:
		how = approvedByMessage
	}
	ctx.SetCustomStatus("shipping")
	parcels, err := shipOrder.ScheduleSub(ctx, shipment{Order: o.ID, Items: o.Items}).Get()
	if err != nil {
		return "", err
	}
	if _, err := ctx.CreateTimer(100 * time.Millisecond).Get(); err != nil {
		return "", err
	}
	if _, err := notify.Schedule(ctx, o.Customer+": your order "+o.ID+" shipped").Get(); err != nil {
		return "", err
	}
	ctx.SetCustomStatus("done")
	return fmt.Sprintf("%s, charged $%d, %s", how, amount, parcels), nil
}

func demo(args []string, out io.Writer) error { return runDemo(args, out, os.Stderr) }

// runDemo runs the demo, printing on out; errOut gets what is reported besides
// the demo's work: telemetry that could not be exported at exit.
func runDemo(args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	path := fs.String("db", "duroq-demo.db", "SQLite database file, or a PostgreSQL URL (postgres://...); reused: a rerun resumes what is there")
	schema := fs.String("schema", "public", "PostgreSQL schema holding duroq's tables (created if missing)")
	orders := fs.Int("orders", 40, "number of orders")
	work := fs.Duration("work", 20*time.Millisecond, "simulated duration of each activity")
	workers := fs.Int("workers", 8, "concurrent activities")
	fresh := fs.Bool("fresh", false, "delete the database first")
	otelTo := fs.String("otel", "", `trace each order, its turns and activities with OpenTelemetry and measure them: "stdout" prints the spans as they end and the metrics at exit on standard output, a JSON object each; "otlp" exports both over OTLP/HTTP (to -otel-endpoint, else as OTEL_EXPORTER_OTLP_ENDPOINT says, else http://localhost:4318)`)
	otelEndpoint := fs.String("otel-endpoint", "", "with -otel otlp: the collector's base URL, overriding OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT (/v1/traces and /v1/metrics are added)")
	fs.Parse(args)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *otelTo == "stdout" {
		out = &lockedWriter{w: out} // the exporters write from their own goroutines
	}
	telemetry, err := newDemoOTel(ctx, *otelTo, *otelEndpoint, out)
	if err != nil {
		return err
	}
	// Deferred first, it runs last: it exports the last spans and metrics once the
	// runtime stopped (on success) and everything else is closed.
	defer telemetry.shutdown(ctx, errOut)
	if *fresh && isPostgres(*path) {
		return errors.New("demo: -fresh deletes a SQLite file; on PostgreSQL name a new -schema instead")
	}
	if *fresh {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Remove(*path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	var provider *adapter.Provider
	if isPostgres(*path) {
		provider, err = pgprovider.Open(ctx, *path, pgprovider.Options{DB: pgdb.Options{Schema: *schema}})
	} else {
		provider, err = sqliteprovider.Open(*path, sqliteprovider.Options{})
	}
	if err != nil {
		return err
	}
	defer provider.Close()
	reg, err := demoRegistry(*work)
	if err != nil {
		return err
	}
	// Short locks: work a killed process held is taken over seconds after a rerun.
	opts := runtime.Options{WorkerConcurrency: *workers, OrchestrationConcurrency: 2,
		MinPollInterval: 10 * time.Millisecond, DrainTimeout: 2 * time.Second,
		WorkerLockTimeout: demoLockTimeout, OrchestratorLockTimeout: demoLockTimeout}
	tracer := tracenoop.NewTracerProvider().Tracer("")
	if telemetry != nil {
		opts.TracerProvider, opts.MeterProvider = telemetry.tp, telemetry.mp
		tracer = telemetry.tp.Tracer("duroq demo")
	}
	rt, err := runtime.New(provider, reg, opts)
	if err != nil {
		return err
	}
	runCtx, stopRuntime := context.WithCancel(ctx)
	defer stopRuntime()
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(runCtx) }()
	client := rt.Client()

	ids := make([]string, *orders)
	for i := range ids {
		ids[i] = fmt.Sprintf("order-%03d", i+1)
		orderCtx, span := tracer.Start(ctx, "order "+ids[i]) // the root of the order's trace
		err := startOrder(orderCtx, client, i, ids[i])
		span.End()
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "duroq demo: %d orders on %s (kill it and run it again: it resumes; work a killed process held is retaken after its %v lock lapses)\n",
		*orders, *path, demoLockTimeout)
	fmt.Fprintf(out, "approvals, dealt in turn (order-001 gets the first, order-%03d the first again):\n", len(approvalPlans)+1)
	for _, plan := range approvalPlans {
		fmt.Fprintf(out, "  %s: %s\n", plan.name, plan.what)
	}

	began := time.Now()
	var final map[string]runtime.OrchestrationStatus
	for {
		statuses, err := statusesOf(ctx, client, ids)
		if err != nil {
			return err
		}
		// Raise the approval of the orders whose plan it is once they say they wait.
		for i, id := range ids {
			if st := statuses[id]; planOf(i).expect == approvedByEvent && st.CustomStatus != nil && *st.CustomStatus == statusAwaitingApproval {
				if err := client.RaiseEvent(ctx, id, approvalEvent, "ok"); err != nil {
					return err
				}
			}
		}
		line, done := progress(statuses)
		fmt.Fprintf(out, "  %5.1fs  %s\n", time.Since(began).Seconds(), line)
		if done {
			final = statuses
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %s", line)
		case err := <-ran:
			return fmt.Errorf("runtime stopped: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	stopRuntime()
	<-ran

	fmt.Fprintln(out, "final statuses:")
	failures := 0
	for _, id := range ids {
		st := final[id]
		detail := st.Output
		if st.State == runtime.StateFailed {
			failures++
			detail = st.Failure.DisplayMessage()
		}
		fmt.Fprintf(out, "  %s  %-9s  %s\n", id, st.State, detail)
	}
	if failures > 0 {
		return fmt.Errorf("%d orders failed", failures)
	}
	fmt.Fprintln(out, "approvals:")
	for p, plan := range approvalPlans {
		n, as := 0, 0
		for i := p; i < len(ids); i += len(approvalPlans) {
			n++
			if strings.HasPrefix(final[ids[i]].Output, plan.expect) {
				as++
			}
		}
		if n > 0 {
			fmt.Fprintf(out, "  %s: %d of %d orders %s\n", plan.name, as, n, plan.expect)
		}
	}
	fmt.Fprintf(out, "all %d orders completed in %v\n", len(ids), time.Since(began).Round(time.Millisecond))
	return nil
}

// startOrder starts order i and, when the start created it, sends what its approval
// plan sends at once. Starting an instance that exists changes nothing: a rerun
// resumes, and sends nothing again (an early event raised again could reach an order
// that waits by now).
func startOrder(ctx context.Context, client *runtime.Client, i int, id string) error {
	st, err := client.Status(ctx, id)
	if err != nil {
		return err
	}
	o := order{ID: id, Customer: fmt.Sprintf("customer-%d", i%7), Items: []string{"book", "lamp", "mug"}[:1+i%3]}
	if err := processOrder.Start(ctx, client, id, o); err != nil || st.State != runtime.StateNotFound {
		return err
	}
	switch planOf(i).expect {
	case approvedByMessage:
		return client.EnqueueEvent(ctx, id, approvalQueue, "ok")
	case autoApproved:
		return client.RaiseEvent(ctx, id, approvalEvent, "ok")
	}
	return nil
}

func statusesOf(ctx context.Context, c *runtime.Client, ids []string) (map[string]runtime.OrchestrationStatus, error) {
	out := make(map[string]runtime.OrchestrationStatus, len(ids))
	for _, id := range ids {
		st, err := c.Status(ctx, id)
		if err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, nil
}

// progress summarises the statuses in one line; done is true when every order ended.
func progress(statuses map[string]runtime.OrchestrationStatus) (line string, done bool) {
	phases := map[string]int{}
	ended := 0
	for _, st := range statuses {
		switch {
		case st.Terminal():
			ended++
			phases[strings.ToLower(string(st.State))]++
		case st.CustomStatus != nil:
			phases[*st.CustomStatus]++
		default:
			phases["starting"]++
		}
	}
	var parts []string
	for _, phase := range []string{"starting", "reserving", statusAwaitingApproval, "shipping", "done", "completed", "failed"} {
		if n := phases[phase]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", phase, n))
		}
	}
	return strings.Join(parts, " · "), ended == len(statuses)
}

// lockedWriter serialises writes to w from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
