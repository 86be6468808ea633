// Package processtest runs the second OS process of a cross-process queue test:
// this test binary again, on the same storage, a SQLite file or a PostgreSQL
// schema, which a location string names.
package processtest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/postgres"
	"github.com/duroq/duroq/mq/sqlite"
	"github.com/duroq/duroq/pgdb"
)

// Locations runs f as the subtests "sqlite" and "postgres", with the location of
// a new SQLite file named file and of a new PostgreSQL schema.
func Locations(t *testing.T, file string, f func(t *testing.T, location string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, "sqlite "+filepath.Join(t.TempDir(), file)) })
	t.Run("postgres", func(t *testing.T) {
		dsn, schema := pgtest.Schema(t)
		f(t, "postgres "+schema+" "+dsn)
	})
}

// Open opens the queue at location ("sqlite <path>" or "postgres <schema> <dsn>").
func Open(location string) (mq.MessageQueue, error) {
	kind, rest, _ := strings.Cut(location, " ")
	if kind == "sqlite" {
		return sqlite.Open(rest, sqlite.Options{})
	}
	schema, dsn, _ := strings.Cut(rest, " ")
	return postgres.Open(context.Background(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema}})
}

// Child is a second process: this test binary running one test with an
// environment variable naming the location.
type Child struct {
	cmd    *exec.Cmd
	lines  chan string
	killed bool
}

// StartChild starts this test binary running only test, with env set to
// location, and kills it (SIGKILL) when t ends. The child's output lines come on
// Lines.
func StartChild(t *testing.T, test, env, location string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), env+"="+location)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{cmd: cmd, lines: make(chan string, 1024)}
	t.Cleanup(c.Kill)
	go func() {
		defer close(c.lines)
		scan := bufio.NewScanner(out)
		for scan.Scan() {
			c.lines <- scan.Text()
		}
	}()
	return c
}

// Lines are the lines the child writes to its standard output, closed at its end.
func (c *Child) Lines() <-chan string { return c.lines }

// Kill kills the child with SIGKILL, as a crash would, and waits for its end; only
// the first call does anything.
func (c *Child) Kill() {
	if !c.killed {
		c.killed = true
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		_ = c.cmd.Wait()
	}
}
