package readme_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every Go block of README.md is a copy of code in a file of this module, so each
// compiles and runs against duroq's public API alone: the blocks cannot drift from it.
func TestREADMEGoBlocksAreExamples(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var sources [][]string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, trimmedLines(string(src)))
	}
	blocks := 0
	for rest := string(readme); ; {
		_, after, found := strings.Cut(rest, "\n```go\n")
		if !found {
			break
		}
		block, after, _ := strings.Cut(after, "\n```\n")
		rest = after
		blocks++
		if !slices.ContainsFunc(sources, func(src []string) bool { return containsRun(src, trimmedLines(block)) }) {
			t.Errorf("README block %d is in no .go file of examples/readme; copy it from one:\n%s", blocks, block)
		}
	}
	if blocks == 0 {
		t.Fatal("README.md has no Go block: the test reads the wrong file")
	}
}

// trimmedLines splits s into lines without their indentation: README blocks are
// example code moved out of its function.
func trimmedLines(s string) []string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return lines
}

// containsRun reports whether run occurs in lines as consecutive lines.
func containsRun(lines, run []string) bool {
	for i := 0; i+len(run) <= len(lines); i++ {
		if slices.Equal(lines[i:i+len(run)], run) {
			return true
		}
	}
	return false
}
