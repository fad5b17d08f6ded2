#include "textflag.h"

// func Write(p unsafe.Pointer)
TEXT ·Write(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	// PREFETCHW (AX): 0F 0D /1, ModRM 0x08; the Go assembler has no mnemonic for it.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET

// func Read(p unsafe.Pointer)
TEXT ·Read(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET
