package postgres

// Retries returns how many transactions s has run again after a retryable failure.
func Retries(s *Store) int64 { return s.retries.Load() }
