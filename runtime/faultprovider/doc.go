// Package faultprovider wraps a provider.Provider so that its calls fail the way a
// storage backend under stress does, to test a runtime, a client or your own code
// against transient faults on any provider.
//
// Two faults are injected, both as retryable provider errors (provider.IsRetryable)
// caused by ErrInjected:
//
//   - a failure: the call returns the error without reaching the wrapped provider;
//   - a lost reply, for writes only (acks, abandons, renewals, enqueues, appends,
//     session upkeep): the wrapped provider applies the call, then the error is
//     returned anyway, so the caller cannot know that the write landed.
//
// Which calls fail is decided by a generator seeded with Options.Seed, separately
// per operation: the n-th call of an operation gets the same decision in every run
// with the same Options, whatever the other operations do (which goroutine makes
// the n-th call still depends on scheduling).
//
//	faults, err := faultprovider.New(provider, faultprovider.Options{Seed: 1, Rate: 0.05, LostReply: 0.5})
//	rt, err := runtime.New(faults.Provider(), reg, runtime.Options{})
//	...
//	injected := faults.Counts() // per operation: calls, failures, lost replies
//
// The wrapper implements provider.BatchProvider and provider.ManagedProvider exactly
// when the provider it wraps does, so the runtime takes the same code paths as over
// the provider itself; it always implements provider.PendingStartReader,
// provider.ReasonAbandoner, provider.ChangeNotifier and provider.InstanceWatcher,
// falling back to what a provider without them does.
// Management calls and Close are never faulted.
package faultprovider
