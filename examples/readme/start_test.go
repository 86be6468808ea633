package readme_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/runtime"
)

// Start policies (README): a second start of an instance id is refused, or starts
// the instance afresh once it ended, as Temporal's workflow-id reuse policies.
func Example_startPolicies() {
	ctx := context.Background()
	p := adapter.NewMemory(adapter.Options{})
	defer p.Close()
	client := runtime.NewClient(p)

	reject := runtime.StartOptions{IfExists: runtime.StartRejectExisting}
	if err := client.StartOrchestrationWith(ctx, "invoice-7", "Bill", "7", reject); err != nil {
		panic(err)
	}
	err := client.StartOrchestrationWith(ctx, "invoice-7", "Bill", "7", reject)
	fmt.Println(errors.Is(err, runtime.ErrInstanceExists)) // also while the first start is pending
	// Output: true
}
