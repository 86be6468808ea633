package conformance

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// inconclusiveChildEnv makes TestInconclusiveFailsWhenStrict run as the child that
// reaches an inconclusive check.
const inconclusiveChildEnv = "CONFORMANCE_INCONCLUSIVE_CHILD"

// An inconclusive timing check skips, saying why, unless StrictTimingEnv is set:
// then it fails (CI sets it, so a slow run cannot pass a timing check by skipping).
func TestInconclusiveFailsWhenStrict(t *testing.T) {
	if os.Getenv(inconclusiveChildEnv) != "" {
		inconclusive(t, "a check of this test")
		return
	}
	for _, strict := range []bool{false, true} {
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, StrictTimingEnv+"=") })
		env = append(env, inconclusiveChildEnv+"=1")
		if strict {
			env = append(env, StrictTimingEnv+"=1")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestInconclusiveFailsWhenStrict$", "-test.v")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		switch {
		case strict && (err == nil || !strings.Contains(string(out), "inconclusive, and "+StrictTimingEnv+" is set")):
			t.Errorf("with %s set: exit %v, output:\n%s\nwant a failure naming the variable", StrictTimingEnv, err, out)
		case !strict && (err != nil || !strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "inconclusive: a check of this test")):
			t.Errorf("without %s: exit %v, output:\n%s\nwant a skip saying why", StrictTimingEnv, err, out)
		}
	}
}
