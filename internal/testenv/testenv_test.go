package testenv

import (
	"fmt"
	"testing"
)

// recorder stands in for a test: it notes a skip or a failure instead of ending
// the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skip(args ...any)                  { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestSkipOrFail(t *testing.T) {
	t.Run("skips without the variable", func(t *testing.T) {
		t.Setenv(EnvRequireServices, "")
		r := &recorder{}
		SkipOrFail(r, "no server")
		if r.skipped != "no server" || r.failed != "" {
			t.Fatalf("skipped %q, failed %q; want a skip saying why", r.skipped, r.failed)
		}
	})
	t.Run("fails with it", func(t *testing.T) {
		t.Setenv(EnvRequireServices, "1")
		r := &recorder{}
		SkipOrFail(r, "no server")
		if r.skipped != "" || r.failed == "" {
			t.Fatalf("skipped %q, failed %q; want a failure", r.skipped, r.failed)
		}
	})
}
