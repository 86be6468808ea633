// Package readme holds the Go code of duroq's README.md, compiled and run from
// outside the duroq module, as a user's code would be: it sees only duroq's public
// packages. Its tests are the README's examples, and TestREADMEGoBlocksAreExamples
// checks block by block that every Go block of README.md is copied from them.
package readme
