package readme_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/duroq/duroq/eventstore"
	esqlite "github.com/duroq/duroq/eventstore/sqlite"
)

// The event store (README): an append-only stream on a SQLite file, read back in
// sequence order; a duplicate sequence number is refused.
func Example_eventStore() {
	dir, err := os.MkdirTemp("", "duroq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	b := []byte(`{"order":42}`)

	store, err := esqlite.Open(filepath.Join(dir, "app.db"), esqlite.Options{}) // github.com/duroq/duroq/eventstore/sqlite
	if err != nil {
		panic(err)
	}
	defer store.Close()
	err = store.Append(ctx, "order-42", 1, []eventstore.Event{{Seq: 1, Type: "Started", Data: b}})
	if err != nil {
		panic(err)
	}
	err = store.Append(ctx, "order-42", 1, []eventstore.Event{{Seq: 1, Type: "Started again"}}) // refused: nothing written
	fmt.Println(errors.Is(err, eventstore.ErrConflict))
	events, err := store.Read(ctx, "order-42", 1) // in sequence order
	if err != nil {
		panic(err)
	}
	fmt.Println(len(events), events[0].Type, string(events[0].Data))
	// Output:
	// true
	// 1 Started {"order":42}
}
