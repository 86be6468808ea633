package eventstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/duroq/duroq/eventstore"
)

// An orchestration instance as a stream: two partitions (a continue-as-new in
// between), metadata, KV state carried across, and a duplicate append refused.
func Example() {
	ctx := context.Background()
	store := eventstore.NewMemory(eventstore.MemoryOptions{})
	defer store.Close()

	// Execution 1 records two events, a KV write, and ends with continue-as-new.
	err := store.Append(ctx, "order-42", 1, []eventstore.Event{
		{Seq: 1, Type: "OrchestrationStarted", Data: []byte(`{"input":"a"}`)},
		{Seq: 2, Type: "OrchestrationContinuedAsNew", Data: []byte(`{"input":"b"}`)},
	})
	if err != nil {
		panic(err)
	}
	_ = store.ApplyKV(ctx, "order-42", 1, []eventstore.KVMutation{{Op: eventstore.KVSet, Key: "step", Value: "1"}})
	can := eventstore.StatusContinuedAsNew
	name := "ProcessOrder"
	_ = store.Update(ctx, "order-42", eventstore.StreamUpdate{Partition: 1, Name: &name, Status: &can})

	// Execution 2 starts a new partition; the caller numbers its events from 1 again.
	_ = store.Append(ctx, "order-42", 2, []eventstore.Event{{Seq: 1, Type: "OrchestrationStarted"}})

	// Appending an existing sequence number is refused and writes nothing.
	err = store.Append(ctx, "order-42", 2, []eventstore.Event{{Seq: 1}})
	var conflict *eventstore.ConflictError
	fmt.Println(errors.Is(err, eventstore.ErrConflict), errors.As(err, &conflict) && conflict.Seq == 1)

	partition, events, _ := store.ReadLatest(ctx, "order-42")
	info, _ := store.Stream(ctx, "order-42")
	snapshot, _ := store.KVSnapshot(ctx, "order-42")
	fmt.Println(info.Name, info.Status, "partition", partition, "events", len(events))
	fmt.Println("kv carried into execution 2:", snapshot["step"].Value)

	// Output:
	// true true
	// ProcessOrder Running partition 2 events 1
	// kv carried into execution 2: 1
}
