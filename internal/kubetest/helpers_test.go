package kubetest

import (
	"os/exec"
	"strconv"
)

func itoa(n int) string { return strconv.Itoa(n) }

func runScript(path string, args ...string) (string, error) {
	out, err := exec.Command(path, args...).Output()
	return string(out), err
}
