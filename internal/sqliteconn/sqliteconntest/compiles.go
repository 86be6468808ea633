package sqliteconntest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/duroq/duroq/internal/sqliteconn"
)

// Compiles follows what SQLite compiles on one database, round by round of
// operations (see sqliteconn.CountCompiles).
type Compiles struct {
	t     testing.TB
	count func() int64
}

// CountCompiles starts counting the compilations on the database at path: call it
// before opening the database.
func CountCompiles(t testing.TB, path string) *Compiles {
	return &Compiles{t: t, count: sqliteconn.CountCompiles(path)}
}

// Rounds runs round n times; a round runs its operations through do, which fails
// t on an error. The first round compiles the statements; a later round that
// compiles anything fails t, naming its operations that did and how much.
func (c *Compiles) Rounds(n int, round func(r int, do func(name string, op func() error))) {
	c.t.Helper()
	for r := range n {
		var compiled []string
		round(r, func(name string, op func() error) {
			c.t.Helper()
			before := c.count()
			if err := op(); err != nil {
				c.t.Fatalf("round %d, %s: %v", r, name, err)
			}
			if n := c.count() - before; n > 0 {
				compiled = append(compiled, fmt.Sprintf("%s (%d)", name, n))
			}
		})
		if r > 0 && len(compiled) > 0 {
			c.t.Errorf("round %d compiled statements again: %s", r, strings.Join(compiled, ", "))
		}
	}
}
