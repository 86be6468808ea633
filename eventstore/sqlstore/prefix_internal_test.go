package sqlstore

import (
	"strings"
	"testing"
)

// prefixEnd bounds exactly the ids with a prefix: every string with the prefix is
// below the end, and the end itself and what follows do not have it.
func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct {
		prefix, end string
		ok          bool
	}{
		{"order-", "order.", true},
		{"a\u00e9", "a\u00ea", true},
		{"x\ud7ff", "x\ue000", true},
		{"y\U0010FFFF", "z", true},
		{"\U0010FFFF", "", false},
		{"a\xff", "b", true},
		{"\xff\xff", "", false},
	} {
		end, ok := prefixEnd(c.prefix)
		if end != c.end || ok != c.ok {
			t.Errorf("prefixEnd(%q) = %q, %v; want %q, %v", c.prefix, end, ok, c.end, c.ok)
			continue
		}
		if ok && (strings.HasPrefix(end, c.prefix) || c.prefix+"\U0010FFFF" >= end) {
			t.Errorf("prefixEnd(%q) = %q does not bound the prefix's strings", c.prefix, end)
		}
	}
}
