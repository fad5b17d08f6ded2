package prefetch

import (
	"bytes"
	"testing"
	"unsafe"
)

// A hint on every line of a buffer, its first and last bytes included,
// neither faults nor changes what the buffer holds.
func TestHintsChangeNothing(t *testing.T) {
	buf := make([]byte, 4096+7)
	for i := range buf {
		buf[i] = byte(i*31 + 7)
	}
	want := bytes.Clone(buf)
	for i := 0; i < len(buf); i += 13 {
		Read(unsafe.Pointer(&buf[i]))
		Write(unsafe.Pointer(&buf[i]))
	}
	Read(unsafe.Pointer(&buf[len(buf)-1]))
	Write(unsafe.Pointer(&buf[len(buf)-1]))
	if !bytes.Equal(buf, want) {
		t.Fatal("a prefetch hint changed the buffer")
	}
}
