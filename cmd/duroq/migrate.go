package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/duroq/duroq/internal/migrate"
	"github.com/duroq/duroq/pgdb"
	"github.com/duroq/duroq/pgprovider"
	"github.com/duroq/duroq/sqliteprovider"
)

var migrateGroup = &commandGroup{name: "migrate", subject: "", selfOpen: true,
	synopsis: "[-db <sqlite file | postgres://...>] [-schema name] [-json]",
	commands: []instanceCommand{
		{"status", "", "show, per migration line, the version applied, the latest and the pending migrations (-check: exit 1 if any)", 0, statusFlags},
		{"up", "", "apply the pending migrations (-create: create a missing SQLite file or schema), then show the status", 0, upFlags},
		{"sql", "", "print the migration SQL of a backend (-backend sqlite|postgres) in order, for running it yourself", 0, sqlFlags},
	}}

// migrateCmd runs `duroq migrate <status|up|sql> [flags]`, writing results to stdout
// and usage to stderr.
func migrateCmd(args []string, stdout, stderr io.Writer) error {
	return migrateGroup.run(args, stdout, stderr)
}

// ---- status ----

// lineStatus is a migration line's state in a database, as status prints it.
type lineStatus struct {
	Line    string   `json:"line"`
	Applied int      `json:"applied"`
	Latest  int      `json:"latest"`
	Pending []string `json:"pending"` // the files to apply, in order
}

// statusJSON is what status (and up) print with -json.
type statusJSON struct {
	Backend string       `json:"backend"`
	Path    string       `json:"path,omitempty"`   // SQLite
	Schema  string       `json:"schema,omitempty"` // PostgreSQL
	Exists  bool         `json:"exists"`           // the SQLite file or the schema exists
	Lines   []lineStatus `json:"lines"`
	Pending int          `json:"pending"` // migrations pending, all lines together
	Newer   []string     `json:"newer,omitempty"`
}

func statusFlags(fs *flag.FlagSet) runner {
	check := fs.Bool("check", false, "exit with status 1 when a migration is pending (for deploy scripts)")
	return func(ctx context.Context, s *session, _ []string) error {
		st, err := s.migrationStatus(ctx)
		if err != nil {
			return err
		}
		if err := s.printStatus(st); err != nil {
			return err
		}
		if *check {
			return st.problem()
		}
		return nil
	}
}

// migrationStatus reads the state of the database's migration lines, creating
// nothing.
func (s *session) migrationStatus(ctx context.Context) (*statusJSON, error) {
	if s.db == "" {
		return nil, usageError("-db is required")
	}
	t, err := openTarget(ctx, s.db, s.schema)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	versions, err := t.applied(ctx)
	if err != nil {
		return nil, err
	}
	st := &statusJSON{Backend: t.backend, Exists: t.db != nil, Lines: []lineStatus{}}
	if t.backend == "postgres" {
		st.Schema = s.schema
	} else {
		st.Path = s.db
	}
	for i, l := range backends[t.backend].lines {
		migs, err := migrate.Load(l.fsys, "migrations")
		if err != nil {
			return nil, err
		}
		ls := lineStatus{Line: l.name, Applied: versions[i], Latest: len(migs), Pending: []string{}}
		for _, m := range migs[min(versions[i], len(migs)):] {
			ls.Pending = append(ls.Pending, m.Name)
		}
		st.Pending += len(ls.Pending)
		if ls.Applied > ls.Latest {
			st.Newer = append(st.Newer, l.name)
		}
		st.Lines = append(st.Lines, ls)
	}
	return st, nil
}

// problem is what `status -check` fails with: pending migrations, or a database
// newer than this build.
func (st *statusJSON) problem() error {
	switch {
	case len(st.Newer) > 0:
		return fmt.Errorf("the database is newer than this build (lines %s): upgrade duroq", strings.Join(st.Newer, ", "))
	case st.Pending > 0:
		return fmt.Errorf("%d migrations pending", st.Pending)
	}
	return nil
}

func (s *session) printStatus(st *statusJSON) error {
	return s.emit(st, func(w io.Writer) {
		where := "SQLite file " + cell(st.Path)
		if st.Backend == "postgres" {
			where = "PostgreSQL schema " + cell(st.Schema)
		}
		if !st.Exists {
			where += " (does not exist: migrate up -create creates it)"
		}
		fmt.Fprintf(w, "%s\n\nLINE\tAPPLIED\tLATEST\tPENDING\n", where)
		for _, l := range st.Lines {
			pending := strings.Join(l.Pending, " ")
			if l.Applied > l.Latest {
				pending = "(newer than this build)"
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", l.Line, l.Applied, l.Latest, cmp.Or(pending, "-"))
		}
		switch err := st.problem(); {
		case err != nil:
			fmt.Fprintf(w, "\n%s\n", err)
		default:
			fmt.Fprintln(w, "\nup to date")
		}
	})
}

// ---- up ----

func upFlags(fs *flag.FlagSet) runner {
	create := fs.Bool("create", false, "create the SQLite file or the PostgreSQL schema if it does not exist")
	return func(ctx context.Context, s *session, _ []string) error {
		st, err := s.migrationStatus(ctx)
		if err != nil {
			return err
		}
		if !st.Exists && !*create {
			what := "no SQLite database at " + clip(s.db)
			if st.Backend == "postgres" {
				what = fmt.Sprintf("no schema %q", clip(s.schema))
			}
			return fmt.Errorf("%s: -create creates it", what)
		}
		if len(st.Newer) > 0 {
			return st.problem()
		}
		if st.Pending > 0 || !st.Exists {
			// The providers apply every pending migration when they open.
			if st.Backend == "postgres" {
				p, err := pgprovider.Open(ctx, s.db, pgprovider.Options{DB: pgdb.Options{Schema: s.schema}})
				if err != nil {
					return err
				}
				p.Close()
			} else {
				p, err := sqliteprovider.Open(s.db, sqliteprovider.Options{})
				if err != nil {
					return err
				}
				p.Close()
			}
		}
		if !s.json {
			fmt.Fprintf(s.out, "applied %d migrations\n", st.Pending)
		}
		if st, err = s.migrationStatus(ctx); err != nil {
			return err
		}
		if err := s.printStatus(st); err != nil {
			return err
		}
		return st.problem()
	}
}

// ---- sql ----

func sqlFlags(fs *flag.FlagSet) runner {
	backend := fs.String("backend", "", "the backend whose migrations to print: sqlite or postgres (required)")
	line := fs.String("line", "", "print only this migration line: mq or eventstore (default: both)")
	return func(_ context.Context, s *session, _ []string) error {
		b, ok := backends[*backend]
		switch {
		case *backend == "":
			return usageError("-backend is required (sqlite or postgres)")
		case !ok:
			return usageError(fmt.Sprintf("unknown backend %q: want sqlite or postgres", clip(*backend)))
		case *line != "" && !slices.ContainsFunc(b.lines, func(l migrationLine) bool { return l.name == *line }):
			return usageError(fmt.Sprintf("unknown migration line %q: want mq or eventstore", clip(*line)))
		case s.json:
			return usageError("sql prints SQL: -json does not apply")
		}
		return printMigrationSQL(s.out, *backend, *line)
	}
}

// printMigrationSQL prints the migrations of backend's lines (or of line alone) in
// the order a provider applies them, each after a comment naming its line and
// version and followed by the row that records it in the version table, so that the
// output applied by hand leaves the database as `migrate up` would.
func printMigrationSQL(w io.Writer, backend, line string) error {
	b := backends[backend]
	var out strings.Builder
	fmt.Fprintf(&out, "-- duroq migrations for %s. Run them in one transaction; a line's versions already\n"+
		"-- applied (duroq migrate status) must be left out. %s records them.\n\n%s;\n",
		backend, b.dialect.VersionTable, migrate.CreateVersionTable(b.dialect))
	for _, l := range b.lines {
		if line != "" && l.name != line {
			continue
		}
		migs, err := migrate.Load(l.fsys, "migrations")
		if err != nil {
			return err
		}
		for _, m := range migs {
			fmt.Fprintf(&out, "\n-- duroq migration: line %s, version %d (%s)\n", l.name, m.Version, m.Name)
			out.WriteString(strings.TrimRight(m.SQL, "\n") + "\n")
			fmt.Fprintf(&out, "INSERT INTO %s (line, version, name) VALUES (%s, %d, %s);\n",
				b.dialect.VersionTable, sqlString(l.name), m.Version, sqlString(m.Name))
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// sqlString quotes s as an SQL string literal.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
