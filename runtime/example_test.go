package runtime_test

import (
	"context"
	"fmt"
	"time"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
)

type Order struct {
	ID    string
	Items []string
}

type Receipt struct {
	OrderID string
	Charged int
	Shipped []string
}

var (
	charge = runtime.NewActivity[Order, int]("Charge")
	ship   = runtime.NewActivity[string, string]("Ship")
	fulfil = runtime.NewOrchestration[Order, Receipt]("Fulfil")
)

// An order workflow with typed activities: charge, then ship every item in parallel.
// The orchestration is a plain function, replayed from its history after a crash.
func Example() {
	reg := runtime.NewRegistry()
	_ = charge.Register(reg, func(_ *runtime.ActivityContext, o Order) (int, error) { return 10 * len(o.Items), nil })
	_ = ship.Register(reg, func(_ *runtime.ActivityContext, item string) (string, error) { return item + " shipped", nil })
	_ = fulfil.Register(reg, func(ctx *runtime.Context, o Order) (Receipt, error) {
		amount, err := charge.Schedule(ctx, o).Get()
		if err != nil {
			return Receipt{}, err
		}
		var shipments []runtime.TypedFuture[string]
		for _, item := range o.Items {
			shipments = append(shipments, ship.Schedule(ctx, item))
		}
		r := Receipt{OrderID: o.ID, Charged: amount}
		for _, f := range shipments {
			s, err := f.Get()
			if err != nil {
				return Receipt{}, err
			}
			r.Shipped = append(r.Shipped, s)
		}
		return r, nil
	})

	provider := adapter.NewMemory(adapter.Options{}) // or sqliteprovider.Open("app.db", ...)
	defer provider.Close()
	rt, _ := runtime.New(provider, reg, runtime.Options{})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go rt.Run(ctx)

	client := rt.Client()
	_ = fulfil.Start(ctx, client, "order-1", Order{ID: "order-1", Items: []string{"book", "lamp"}})
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	receipt, err := fulfil.Wait(wait, client, "order-1")
	fmt.Println(receipt, err)
	// Output: {order-1 20 [book shipped lamp shipped]} <nil>
}
