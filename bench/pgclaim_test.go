package bench_test

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/internal/testenv"
)

// bench/pgclaim/run.sh, shortened, measures the three claims twice (six lines of
// messages per second) and drops its schema.
func TestPGClaimScript(t *testing.T) {
	dsn := pgtest.DSN(t)
	if _, err := exec.LookPath("pgbench"); err != nil {
		testenv.SkipOrFail(t, "bench/pgclaim needs pgbench (Debian: the postgresql package): "+err.Error())
	}
	cmd := exec.Command("bash", "pgclaim/run.sh")
	cmd.Env = append(os.Environ(), "DUROQ_POSTGRES_DSN="+dsn, "SECONDS_PER_RUN=1", "ROWS=20000")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, out)
	}
	lines := regexp.MustCompile(`(?m)^(rewrite|keyrow|keyqueue) +64 keys of 10 per claim: +(\d+) msgs/s`).FindAllStringSubmatch(string(out), -1)
	if len(lines) != 6 {
		t.Fatalf("run.sh printed %d measurements, want 6:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if n, _ := strconv.Atoi(l[2]); n <= 0 {
			t.Errorf("%s measured %d msgs/s:\n%s", l[1], n, out)
		}
	}
	if pgtest.SchemaExists(t, dsn, "duroq_pgclaim") {
		t.Error("run.sh left its schema behind")
	}
}
