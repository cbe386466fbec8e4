package native

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	SealSelf()
	os.Exit(m.Run())
}
