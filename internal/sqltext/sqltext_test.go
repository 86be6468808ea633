package sqltext

import "testing"

func TestLists(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Params(1), "?"}, {Params(3), "?,?,?"},
		{Rows(1, 1), "(?)"}, {Rows(2, 3), "(?,?,?),(?,?,?)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
