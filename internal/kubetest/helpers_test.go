package kubetest

import (
	"errors"
	"os/exec"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

func itoa(n int) string { return strconv.Itoa(n) }

func runScript(path string, args ...string) (string, error) {
	out, err := exec.Command(path, args...).Output()
	return string(out), err
}

type phaseError struct {
	phase corev1.PodPhase
	node  string
}

func (e *phaseError) Error() string { return "phase " + string(e.phase) + " on node " + e.node }

var errStill = errors.New("still there")
