package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRowsApply: every row still names code that occurs exactly once in
// its file, under a name no other row has, so that a change to the code
// shows in make test rather than as a "stale" row at the next full make
// mutate (one went unnoticed that way for a day); and no two rows make
// the same mutant (one was written twice, under two names).
func TestRowsApply(t *testing.T) {
	root := filepath.Join("..", "..")
	names := map[string]bool{}
	mutants := map[string]string{} // file and mutated text: the row that makes it
	for _, m := range mutations {
		if names[m.Name] {
			t.Errorf("two rows are named %s", m.Name)
		}
		names[m.Name] = true
		if m.Name == "" || m.Rule == "" || m.Pkg == "" || m.Old == m.New {
			t.Errorf("row %q: a name, a rule, a package and a change are required", m.Name)
		}
		if _, err := os.Stat(filepath.Join(root, strings.TrimPrefix(m.Pkg, "./"))); err != nil {
			t.Errorf("row %s: package %s: %v", m.Name, m.Pkg, err)
		}
		b, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			t.Errorf("row %s: %v", m.Name, err)
			continue
		}
		if n := bytes.Count(b, []byte(m.Old)); n != 1 {
			t.Errorf("row %s: its code occurs %d times in %s, want once", m.Name, n, m.File)
		}
		key := m.File + "\x00" + string(bytes.Replace(b, []byte(m.Old), []byte(m.New), 1))
		if other, ok := mutants[key]; ok {
			t.Errorf("rows %s and %s make the same mutant of %s", other, m.Name, m.File)
		}
		mutants[key] = m.Name
	}
}
