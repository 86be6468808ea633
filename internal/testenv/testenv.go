// Package testenv decides what a test does when a service it needs (a PostgreSQL
// server, a browser) is missing: skip with a message saying how to provide it, or,
// when DUROQ_REQUIRE_SERVICES is set, as CI does, fail, so a suite that did not run
// cannot pass unseen.
package testenv

import (
	"os"
	"testing"
)

// EnvRequireServices names the environment variable that, when non-empty, turns
// SkipOrFail's skip into a failure.
const EnvRequireServices = "DUROQ_REQUIRE_SERVICES"

// SkipOrFail skips t with msg, or fails it when EnvRequireServices is set.
func SkipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(EnvRequireServices) != "" {
		t.Fatalf("%s (%s is set: a missing service fails the test)", msg, EnvRequireServices)
		return
	}
	t.Skip(msg)
}
