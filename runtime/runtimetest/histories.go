package runtimetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// HistoriesFormat names the JSON document WriteHistories writes and ReadHistories
// reads (what `duroq export` writes).
const HistoriesFormat = "duroq.histories/v1"

// Execution is the recorded history of one execution of an instance.
type Execution struct {
	Instance    string           `json:"instance"`     // the instance the execution belongs to
	ExecutionID uint64           `json:"execution_id"` // the execution's id (1 for the first)
	Events      []provider.Event `json:"events"`       // its history, ordered by EventID
}

// ExportFilter selects what Export reads. The zero value selects every execution of
// every instance.
type ExportFilter struct {
	// Instances limits the export to these instances (none: every instance).
	Instances []string
	// Orchestrations limits it to executions of these orchestrations (none: any).
	Orchestrations []string
}

// Export reads the recorded executions f selects from a provider's management
// interface (ordered by instance, then execution), for ReplayExecutions or for
// WriteHistories.
func Export(ctx context.Context, admin provider.ProviderAdmin, f ExportFilter) ([]Execution, error) {
	instances := f.Instances
	if len(instances) == 0 {
		var err error
		if instances, err = admin.ListInstances(ctx); err != nil {
			return nil, fmt.Errorf("export: list instances: %w", err)
		}
	}
	wanted := map[string]bool{}
	for _, name := range f.Orchestrations {
		wanted[name] = true
	}
	var out []Execution
	for _, instance := range instances {
		ids, err := admin.ListExecutions(ctx, instance)
		if err != nil {
			return nil, fmt.Errorf("export: executions of %q: %w", instance, err)
		}
		if len(ids) == 0 && len(f.Instances) > 0 {
			return nil, fmt.Errorf("export: instance %q: %w", instance, provider.ErrNotFound)
		}
		for _, id := range ids {
			events, err := admin.ReadHistoryWithExecutionID(ctx, instance, id)
			if err != nil {
				return nil, fmt.Errorf("export: history of %q execution %d: %w", instance, id, err)
			}
			if len(wanted) > 0 && (len(events) == 0 || !wanted[events[0].Name]) {
				continue
			}
			out = append(out, Execution{Instance: instance, ExecutionID: id, Events: events})
		}
	}
	return out, nil
}

type historiesDoc struct {
	Format     string      `json:"format"`
	Executions []Execution `json:"executions"`
}

// WriteHistories writes executions as one JSON document.
func WriteHistories(w io.Writer, executions []Execution) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	if executions == nil {
		executions = []Execution{}
	}
	if err := enc.Encode(historiesDoc{Format: HistoriesFormat, Executions: executions}); err != nil {
		return fmt.Errorf("write histories: %w", err)
	}
	return nil
}

// ReadHistories reads a document WriteHistories (or `duroq export`) wrote.
func ReadHistories(r io.Reader) ([]Execution, error) {
	var doc historiesDoc
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("read histories: %w: %w", provider.ErrInvalid, err)
	}
	if doc.Format != HistoriesFormat {
		return nil, fmt.Errorf("read histories: %w: format %.40q, want %q", provider.ErrInvalid, doc.Format, HistoriesFormat)
	}
	return doc.Executions, nil
}

// ReplayExecutions replays each execution against reg's code with runtime.Replay
// and returns every difference found, joined (nil when the code agrees with all of
// them): errors.Is(err, runtime.ErrNondeterminism) tells a code change that would
// break running instances.
func ReplayExecutions(ctx context.Context, reg *runtime.Registry, executions []Execution) error {
	var errs []error
	for _, x := range executions {
		if err := runtime.Replay(ctx, reg, x.Events); err != nil {
			errs = append(errs, err) // it names the instance and execution
		}
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}
