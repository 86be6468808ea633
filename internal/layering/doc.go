// Package layering holds the test that enforces the module's dependency direction
// (DESIGN.md): contracts import only the standard library and their helpers,
// backends import their contract, only the adapter knows mq, eventstore and runtime
// together, and the suites and benchmarks never import a backend. Every package has
// a rule: a new package fails the test until it says what it may import.
package layering
