package pgsql

// StatsLockKey is the advisory lock StatsGuard's checks hold, for tests that stand
// in for another process.
const StatsLockKey = statsLockKey
