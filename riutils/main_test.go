package riutils

import (
	"testing"

	"github.com/seriema-go/seriema/internal/jobtest"
)

func TestMain(m *testing.M) { jobtest.Main(m) }
