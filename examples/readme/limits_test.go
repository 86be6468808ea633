package readme_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

// Example_limits is the limits block of README's queue section.
func Example_limits() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	q, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer q.Close()

	// At most 2 emails in flight in every process together, and 100 a minute to
	// the provider called "acme".
	if err := q.SetLimit(ctx, "emails", "", mq.Limit{MaxInFlight: 2}); err != nil {
		panic(err)
	}
	if err := q.SetLimit(ctx, "emails", "acme", mq.Limit{Rate: 100, Per: time.Minute}); err != nil {
		panic(err)
	}
	for _, to := range []string{"ann", "bob", "cy"} {
		m := mq.Message{Queue: "emails", LimitGroup: "acme", Payload: []byte("hello " + to)}
		if err := q.Enqueue(ctx, m); err != nil {
			panic(err)
		}
	}
	held, err := q.DequeueBatches(ctx, "emails", mq.DequeueOptions{}, 10)
	if err != nil {
		panic(err)
	}
	limits, err := q.Limits(ctx, "emails")
	if err != nil {
		panic(err)
	}
	fmt.Println("batches taken:", len(held), "· in flight:", limits[0].InFlight, "of", limits[0].MaxInFlight)
	// Output: batches taken: 2 · in flight: 2 of 2
}
