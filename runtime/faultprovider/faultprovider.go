package faultprovider

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"

	"github.com/duroq/duroq/runtime/provider"
)

// ErrInjected is the cause of every injected fault (match it with errors.Is).
var ErrInjected = errors.New("faultprovider: injected fault")

// errLostReply says, in the message, that the failed call was applied all the same.
var errLostReply = fmt.Errorf("%w (reply lost: the operation was applied)", ErrInjected)

// Op names a provider operation as provider.ProviderError.Op does.
type Op string

// The operations that can be faulted. A batched call is its own operation (its
// single-item form is another).
const (
	OpFetchOrchestrationItem     Op = "fetch_orchestration_item"
	OpFetchOrchestrationItems    Op = "fetch_orchestration_items"
	OpAckOrchestrationItem       Op = "ack_orchestration_item"
	OpAckOrchestrationItems      Op = "ack_orchestration_items"
	OpAbandonOrchestrationItem   Op = "abandon_orchestration_item" // with or without a reason
	OpRenewOrchestrationItemLock Op = "renew_orchestration_item_lock"
	OpFetchWorkItem              Op = "fetch_work_item"
	OpFetchWorkItems             Op = "fetch_work_items"
	OpAckWorkItem                Op = "ack_work_item"
	OpAckWorkItems               Op = "ack_work_items"
	OpAbandonWorkItem            Op = "abandon_work_item"
	OpRenewWorkItemLock          Op = "renew_work_item_lock"
	OpRenewSessionLock           Op = "renew_session_lock"
	OpCleanupOrphanedSessions    Op = "cleanup_orphaned_sessions"
	OpEnqueueForOrchestrator     Op = "enqueue_for_orchestrator"
	OpEnqueueForWorker           Op = "enqueue_for_worker"
	OpRead                       Op = "read"
	OpReadWithExecution          Op = "read_with_execution"
	OpAppendWithExecution        Op = "append_with_execution"
	OpGetCustomStatus            Op = "get_custom_status"
	OpGetKVValue                 Op = "get_kv_value"
	OpGetKVAllValues             Op = "get_kv_all_values"
	OpGetInstanceStats           Op = "get_instance_stats"
	OpPendingStart               Op = "pending_start"
)

// ops maps every operation to whether it is a write, whose reply can be lost after
// it was applied.
var ops = map[Op]bool{
	OpFetchOrchestrationItem: false, OpFetchOrchestrationItems: false, OpAckOrchestrationItem: true,
	OpAckOrchestrationItems: true, OpAbandonOrchestrationItem: true, OpRenewOrchestrationItemLock: true,
	OpFetchWorkItem: false, OpFetchWorkItems: false, OpAckWorkItem: true, OpAckWorkItems: true,
	OpAbandonWorkItem: true, OpRenewWorkItemLock: true, OpRenewSessionLock: true, OpCleanupOrphanedSessions: true,
	OpEnqueueForOrchestrator: true, OpEnqueueForWorker: true, OpRead: false, OpReadWithExecution: false,
	OpAppendWithExecution: true, OpGetCustomStatus: false, OpGetKVValue: false, OpGetKVAllValues: false,
	OpGetInstanceStats: false, OpPendingStart: false,
}

// Options configure the faults. The zero value injects none.
type Options struct {
	// Seed fixes which calls fail (see the package documentation).
	Seed uint64
	// Rate is the probability that a call of an operation is faulted: 0 (the
	// default) or less never, 1 or more always.
	Rate float64
	// Ops, when not nil, replaces Rate: each operation it lists is faulted at the
	// rate it maps to, the others never.
	Ops map[Op]float64
	// LostReply is the share of a write's faults that are lost replies, the rest
	// being failures before the call: 0 (the default) makes all of them failures,
	// 1 all of them lost replies. Reads only fail.
	LostReply float64
}

// Counts describes the calls of one operation.
type Counts struct {
	Calls       uint64 // calls made through the wrapper
	Failed      uint64 // faulted before reaching the wrapped provider
	LostReplies uint64 // applied by the wrapped provider, then reported failed
}

// Injector injects the faults of a wrapped provider and counts them.
type Injector struct {
	wrapped provider.Provider
	seed    uint64
	lost    float64
	ops     map[Op]*opState // every Op, read-only after New
}

// opState is one operation's rate and counters.
type opState struct {
	rate                float64
	write               bool
	key                 uint64 // separates the operations' decision sequences
	calls, failed, lost atomic.Uint64
}

// New wraps p with the faults opts describe. It fails on a nil p or an operation in
// opts.Ops that does not exist.
func New(p provider.Provider, opts Options) (*Injector, error) {
	if p == nil {
		return nil, errors.New("faultprovider: new: nil provider")
	}
	for op := range opts.Ops {
		if _, ok := ops[op]; !ok {
			return nil, fmt.Errorf("faultprovider: new: unknown operation %q", op)
		}
	}
	f := &Injector{seed: opts.Seed, lost: opts.LostReply, ops: make(map[Op]*opState, len(ops))}
	for op, write := range ops {
		rate := opts.Rate
		if opts.Ops != nil {
			rate = opts.Ops[op]
		}
		h := fnv.New64a()
		h.Write([]byte(op))
		f.ops[op] = &opState{rate: rate, write: write, key: h.Sum64()}
	}
	f.wrapped = withCapabilities(&faulty{f: f, p: p})
	return f, nil
}

// Provider returns the faulty provider (always the same one). Closing it closes the
// wrapped provider.
func (f *Injector) Provider() provider.Provider { return f.wrapped }

// Counts returns every operation's counters so far.
func (f *Injector) Counts() map[Op]Counts {
	out := make(map[Op]Counts, len(f.ops))
	for op, s := range f.ops {
		out[op] = Counts{Calls: s.calls.Load(), Failed: s.failed.Load(), LostReplies: s.lost.Load()}
	}
	return out
}

// fault is the decision for one call.
type fault int

const (
	none fault = iota
	failBefore
	loseReply
)

// decide counts a call of op and draws its fault.
func (f *Injector) decide(op Op) fault {
	s := f.ops[op]
	n := s.calls.Add(1)
	if s.rate <= 0 {
		return none
	}
	x := mix(f.seed ^ s.key + n*0x9e3779b97f4a7c15)
	if unit(x) >= s.rate {
		return none
	}
	if s.write && unit(mix(x)) < f.lost {
		return loseReply
	}
	return failBefore
}

// failed counts a failure of op and returns its error.
func (f *Injector) failed(op Op) error {
	f.ops[op].failed.Add(1)
	return provider.Retryable(string(op), ErrInjected)
}

// lostReply counts a lost reply of op and returns its error.
func (f *Injector) lostReply(op Op) error {
	f.ops[op].lost.Add(1)
	return provider.Retryable(string(op), errLostReply)
}

// mix is SplitMix64's finalizer: consecutive inputs give independent-looking outputs.
func mix(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// unit maps x to [0, 1).
func unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }
