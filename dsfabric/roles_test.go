package dsfabric

import "os"

// roleEnv makes the test binary run a scenario as a plain process (for
// launcher, failure and mpirun tests) instead of the tests.
const roleEnv = "SERIEMA_TEST_ROLE"

func runRole(role string) int {
	switch role {
	default:
		os.Stderr.WriteString("unknown role " + role + "\n")
		return 2
	}
}
