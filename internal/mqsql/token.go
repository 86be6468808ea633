package mqsql

import "github.com/google/uuid"

// NewToken returns a new lock token: a UUIDv7, whose leading timestamp keeps the
// entries that claims add to a token index at its right edge, in a few pages, and
// the acks that look them up there, where random tokens (version 4) wrote and read
// a random leaf each.
func NewToken() string { return uuid.Must(uuid.NewV7()).String() }
