//go:build !ofi

package dtutils

import (
	"errors"
	"testing"
)

// TestOFIUnavailable: a build without the ofi tag says so, clearly.
func TestOFIUnavailable(t *testing.T) {
	if _, err := NewOFI(newProcess(t, 0, nil), DefaultOFIConfig()); !errors.Is(err, ErrOFIUnavailable) || OFIAvailable {
		t.Fatalf("NewOFI without the ofi tag: %v (OFIAvailable %v)", err, OFIAvailable)
	}
}
