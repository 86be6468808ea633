package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/ui"
)

// A UI of a message queue alone, read-only: queues with their counts, messages and
// dead letters, without the instance pages or any action.
func Example_queuesOnly() {
	q := mq.NewMemory(mq.MemoryOptions{})
	defer q.Close()
	ctx := context.Background()
	if err := q.Enqueue(ctx, mq.Message{Queue: "emails", RoutingKey: "alice", Payload: []byte("welcome")}); err != nil {
		panic(err)
	}
	h, err := ui.New(ui.Options{Queues: q, ReadOnly: true})
	if err != nil {
		panic(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/queue?name=emails", nil))
	fmt.Println(rec.Code, strings.Contains(rec.Body.String(), "welcome"))
	// Output: 200 true
}
