package conformance

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime/provider"
)

// ProviderFactory makes fresh providers for TestProvider, with the hooks some cases
// need (duroxide's ProviderFactory).
type ProviderFactory struct {
	// New returns a new, empty provider; the suite closes it.
	New func(t *testing.T) provider.Provider
	// LockTimeout is the lock timeout of tests that wait for locks to lapse (they
	// sleep LockTimeout plus a margin). Default 500ms.
	LockTimeout time.Duration
	// ShortPollThreshold is how fast a short-polling provider must answer an empty
	// fetch. Default 100ms.
	ShortPollThreshold time.Duration
	// LongPolling says the provider honours PollTimeout by waiting for work; the
	// long-poll cases run for such providers and the short-poll ones for the others.
	LongPolling bool
	// CorruptInstanceHistory damages the stored history of instance's current
	// execution so that it can no longer be decoded. Cases that need it skip, saying
	// so, when it is nil.
	CorruptInstanceHistory func(t *testing.T, p provider.Provider, instance string)
	// MaxAttemptCount returns the largest attempt count among instance's pending
	// orchestrator messages. Cases that need it skip, saying so, when it is nil.
	MaxAttemptCount func(t *testing.T, p provider.Provider, instance string) uint32
	// Partial declares that the provider is tested without some capabilities
	// (management, the hooks above): the summary of the cases they kept from running
	// is then logged. By default it fails the suite: such a provider is not shown
	// conformant.
	Partial bool
}

// providerCase is one ported duroxide validation test.
type providerCase struct {
	name     string // the Go subtest name, e.g. "FailureRollback"
	duroxide string // the duroxide function it ports, e.g. "test_atomicity_failure_rollback"
	run      func(t *testing.T, e penv)
}

// providerGroup is one duroxide validation module.
type providerGroup struct {
	name  string // the Go test group, e.g. "Atomicity"
	cases []providerCase
}

// providerGroups lists every ported module; each module's file appends its group in
// an init function so files stay independent.
var providerGroups []providerGroup

func registerProviderGroup(g providerGroup) { providerGroups = append(providerGroups, g) }

// TestProvider runs the port of duroxide's provider validation suite against the
// providers f makes: one subtest per duroxide test, named Group/Case (for example
// TestProvider/Atomicity/FailureRollback), each on a fresh provider.
func TestProvider(t *testing.T, f ProviderFactory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("conformance: ProviderFactory.New is nil")
	}
	if f.LockTimeout == 0 {
		f.LockTimeout = 500 * time.Millisecond
	}
	if f.ShortPollThreshold == 0 {
		f.ShortPollThreshold = 100 * time.Millisecond
	}
	e := penv{f: f, missing: &capabilityTally{}}
	t.Cleanup(func() {
		line := e.missing.summary()
		switch {
		case line == "":
		case f.Partial:
			t.Log(line)
		default:
			t.Error(line + " (set ProviderFactory.Partial to accept that)")
		}
	})
	for _, g := range providerGroups {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, e) })
			}
		})
	}
}

// penv gives cases the factory and shared helpers.
type penv struct {
	f       ProviderFactory
	missing *capabilityTally // the cases skipped for want of a capability
}

// capabilityTally counts, per capability, the cases it kept from running.
type capabilityTally struct {
	mu     sync.Mutex
	counts map[string]int
}

// lacks skips the test, which needs capability, and counts it for the summary.
func (e penv) lacks(t *testing.T, capability, why string) {
	t.Helper()
	e.missing.mu.Lock()
	if e.missing.counts == nil {
		e.missing.counts = map[string]int{}
	}
	e.missing.counts[capability]++
	e.missing.mu.Unlock()
	t.Skipf("needs %s: %s", capability, why)
}

// summary is the not-conformant line, or "" when no case was skipped.
func (c *capabilityTally) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.counts) == 0 {
		return ""
	}
	var parts []string
	n := 0
	for _, capability := range slices.Sorted(maps.Keys(c.counts)) {
		parts = append(parts, fmt.Sprintf("%s (%d)", capability, c.counts[capability]))
		n += c.counts[capability]
	}
	return fmt.Sprintf("not conformant: %d cases did not run for want of %s", n, strings.Join(parts, ", "))
}

// open makes a fresh provider and closes it when the test ends.
func (e penv) open(t *testing.T) provider.Provider {
	t.Helper()
	p := e.f.New(t)
	if p == nil {
		t.Fatal("conformance: ProviderFactory.New returned nil")
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// admin returns p's management capability or skips the test, saying why.
func (e penv) admin(t *testing.T, p provider.Provider) provider.ProviderAdmin {
	t.Helper()
	m, ok := p.(provider.ManagedProvider)
	if !ok {
		e.lacks(t, "management (provider.ManagedProvider)", "the provider does not implement it")
	}
	return m.Management()
}

// lt is the factory's short lock timeout; lapse is how long to sleep for it to lapse.
func (e penv) lt() time.Duration    { return e.f.LockTimeout }
func (e penv) lapse() time.Duration { return e.f.LockTimeout + 100*time.Millisecond }

// longLock is the lock of tests that must not see it lapse.
const longLock = 30 * time.Second

// ---- work item and event builders (duroxide's test helpers) ----

func startItem(instance, name, version, input string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkStartOrchestration, Instance: instance, Name: name, Version: version,
		Input: input, ExecutionID: provider.InitialExecutionID}
}

func startedEvent(id uint64, name, version, input string) provider.Event {
	return provider.Event{Kind: provider.EventOrchestrationStarted, EventID: id, Name: name, Version: version, Input: input}
}

func activityScheduled(id uint64, name, input string) provider.Event {
	return provider.Event{Kind: provider.EventActivityScheduled, EventID: id, Name: name, Input: input}
}

func activityExecute(instance string, execution, id uint64, name, input string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkActivityExecute, Instance: instance, ExecutionID: execution, ID: id, Name: name, Input: input}
}

func activityCompleted(instance string, execution, id uint64, result string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkActivityCompleted, Instance: instance, ExecutionID: execution, ID: id, Result: result}
}

func externalRaised(instance, name, data string) provider.WorkItem {
	return provider.WorkItem{Kind: provider.WorkExternalRaised, Instance: instance, Name: name, Data: data}
}

func ptr[T any](v T) *T { return &v }

// metadata is the ExecutionMetadata duroxide's helpers ack a new instance with.
func metadata(name, version string) provider.ExecutionMetadata {
	return provider.ExecutionMetadata{OrchestrationName: ptr(name), OrchestrationVersion: ptr(version)}
}

// ---- provider calls that fail the test on error ----

func enqueueOrch(t *testing.T, p provider.Provider, item provider.WorkItem, delay time.Duration) {
	t.Helper()
	if err := p.EnqueueForOrchestrator(t.Context(), item, delay); err != nil {
		t.Fatalf("EnqueueForOrchestrator(%s %s): %v", item.Kind, item.TargetInstance(), err)
	}
}

func enqueueWork(t *testing.T, p provider.Provider, item provider.WorkItem) {
	t.Helper()
	if err := p.EnqueueForWorker(t.Context(), item); err != nil {
		t.Fatalf("EnqueueForWorker(%s %s): %v", item.Kind, item.Name, err)
	}
}

// fetchOrch fetches with lock timeout lock and no filter; nil when there is no work.
func fetchOrch(t *testing.T, p provider.Provider, lock time.Duration) *provider.OrchestrationItem {
	t.Helper()
	item, err := p.FetchOrchestrationItem(t.Context(), provider.FetchOptions{LockTimeout: lock})
	if err != nil {
		t.Fatalf("FetchOrchestrationItem: %v", err)
	}
	return item
}

// mustFetchOrch is fetchOrch that requires an item.
func mustFetchOrch(t *testing.T, p provider.Provider, lock time.Duration, what string) *provider.OrchestrationItem {
	t.Helper()
	item := fetchOrch(t, p, lock)
	if item == nil {
		t.Fatalf("FetchOrchestrationItem returned nothing; want %s", what)
	}
	return item
}

// fetchWork fetches a worker item (default tag filter, no session); nil when none.
func fetchWork(t *testing.T, p provider.Provider, lock time.Duration) *provider.WorkItemLease {
	t.Helper()
	lease, err := p.FetchWorkItem(t.Context(), provider.WorkFetchOptions{LockTimeout: lock})
	if err != nil {
		t.Fatalf("FetchWorkItem: %v", err)
	}
	return lease
}

func ackOrch(t *testing.T, p provider.Provider, token string, ack provider.OrchestrationAck) {
	t.Helper()
	if err := p.AckOrchestrationItem(t.Context(), token, ack); err != nil {
		t.Fatalf("AckOrchestrationItem: %v", err)
	}
}

// createInstance is duroxide's create_instance helper: enqueue a start of
// "TestOrch" 1.0.0, fetch it, and ack an OrchestrationStarted with name and version
// metadata, leaving the instance Running with one event in execution 1.
func createInstance(t *testing.T, p provider.Provider, instance string) {
	t.Helper()
	enqueueOrch(t, p, startItem(instance, "TestOrch", "1.0.0", "{}"), 0)
	item := mustFetchOrch(t, p, longLock, "the start of "+instance)
	if item.Instance != instance {
		t.Fatalf("fetched instance %q, want %q", item.Instance, instance)
	}
	ackOrch(t, p, item.LockToken, provider.OrchestrationAck{
		ExecutionID:  provider.InitialExecutionID,
		HistoryDelta: []provider.Event{startedEvent(1, "TestOrch", "1.0.0", "{}")},
		Metadata:     metadata("TestOrch", "1.0.0"),
	})
}

// mustFail fails the test unless err is non-nil.
func mustFail(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded; want an error", what)
	}
}

// mustFailWith fails the test unless errors.Is(err, target).
func mustFailWith(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v; want one matching %v", what, err, target)
	}
}

// readHistory is Read that fails the test on error.
func readHistory(t *testing.T, p provider.Provider, instance string) []provider.Event {
	t.Helper()
	h, err := p.Read(t.Context(), instance)
	if err != nil {
		t.Fatalf("Read(%s): %v", instance, err)
	}
	return h
}
