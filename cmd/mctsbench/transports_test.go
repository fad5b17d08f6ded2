package main

// testTransports are the transports the cross-process tests run over;
// builds with -tags ofi add "ofi" (transports_ofi_test.go).
var testTransports = []string{"shm", "tcp"}
