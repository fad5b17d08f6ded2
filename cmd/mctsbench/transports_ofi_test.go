//go:build ofi

package main

func init() {
	testTransports = append(testTransports, "ofi")
	hostCases = append(hostCases, struct {
		name, flag string
		privateTmp bool
		want       string
	}{"forced-ofi", "-transport ofi", true, "ofi"})
}
