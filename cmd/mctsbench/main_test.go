package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestPendingSubcommandsFailClearly(t *testing.T) {
	for name := range pending {
		var out, errb bytes.Buffer
		if code := run([]string{name}, &out, &errb); code == 0 {
			t.Errorf("%s exits 0 although it is not built", name)
		}
		if !strings.Contains(errb.String(), "not available yet") {
			t.Errorf("%s: unclear message %q", name, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bogus"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown subcommand") {
		t.Errorf("unknown subcommand: %d %q", code, errb.String())
	}
	if code := run(nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage") {
		t.Errorf("no arguments: %d %q", code, out.String())
	}
}
