package conformance_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/duroq/duroq/adapter"
	"github.com/duroq/duroq/conformance"
	"github.com/duroq/duroq/runtime/provider"
)

// partialChildEnv makes TestMissingCapabilitiesAreNotConformant run the suite as a
// child: "strict" or "partial".
const partialChildEnv = "CONFORMANCE_PARTIAL_CHILD"

// A provider tested without a hook a case needs is reported not conformant: the
// suite fails with a summary line, unless the factory declares itself Partial, in
// which case the line is logged and the suite passes.
func TestMissingCapabilitiesAreNotConformant(t *testing.T) {
	if mode := os.Getenv(partialChildEnv); mode != "" {
		conformance.TestProvider(t, conformance.ProviderFactory{
			New:     func(*testing.T) provider.Provider { return adapter.NewMemory(adapter.Options{}) },
			Partial: mode == "partial", // and no CorruptInstanceHistory hook
		})
		return
	}
	const line = "not conformant: 1 cases did not run for want of the CorruptInstanceHistory hook (1)"
	for _, mode := range []string{"strict", "partial"} {
		cmd := exec.Command(os.Args[0], "-test.v",
			"-test.run=^TestMissingCapabilitiesAreNotConformant$/^ErrorHandling$/^CorruptedSerializationData$")
		cmd.Env = append(os.Environ(), partialChildEnv+"="+mode)
		out, err := cmd.CombinedOutput()
		if !strings.Contains(string(out), line) {
			t.Errorf("%s: the output does not say %q:\n%s", mode, line, out)
		}
		if failed := err != nil; failed != (mode == "strict") {
			t.Errorf("%s: exit %v; want a failure only when the factory is not Partial:\n%s", mode, err, out)
		}
	}
}
