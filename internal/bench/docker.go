package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// DockerImage is the image the Docker reference runs. It is imported from
// the host's own /usr (no registry needed), so both sides run the same
// python3 binary.
const DockerImage = "agentbox-bench-host:latest"

// DockerAvailable reports whether a Docker engine answers.
func DockerAvailable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run() == nil
}

// EnsureDockerImage imports DockerImage from the host's /usr and the
// merged-/usr links if it is not there yet.
func EnsureDockerImage(ctx context.Context) error {
	if exec.CommandContext(ctx, "docker", "image", "inspect", DockerImage).Run() == nil {
		return nil
	}
	// A tar of the host's /usr plus the /bin, /lib... symlinks and the few
	// /etc files dynamic binaries need, imported as a one-layer image.
	script := `set -e; cd / && tar -c --one-file-system usr bin sbin lib lib64 etc/ld.so.cache etc/alternatives 2>/dev/null | docker import - ` + DockerImage
	out, err := exec.CommandContext(ctx, "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import docker image: %w: %s", err, out)
	}
	return nil
}

// DockerRun is `docker run --rm` of cmd with the same kind of limits a
// sandbox has.
func DockerRun(ctx context.Context, cmd []string) error {
	args := append([]string{"run", "--rm", "--network", "none", "--memory", "512m", "--pids-limit", "256",
		"--cpus", "1", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", DockerImage}, cmd...)
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker run: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// DockerContainer is a long-running container for exec round trips.
type DockerContainer struct{ ID string }

// StartDockerContainer starts an idle container.
func StartDockerContainer(ctx context.Context) (*DockerContainer, error) {
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--rm", "--network", "none", DockerImage, "sleep", "infinity").Output()
	if err != nil {
		return nil, fmt.Errorf("docker run -d: %w", err)
	}
	return &DockerContainer{ID: strings.TrimSpace(string(out))}, nil
}

// Exec runs cmd in the container with docker exec.
func (c *DockerContainer) Exec(ctx context.Context, cmd []string) error {
	return exec.CommandContext(ctx, "docker", append([]string{"exec", c.ID}, cmd...)...).Run()
}

// Remove kills and removes the container.
func (c *DockerContainer) Remove(ctx context.Context) error {
	return exec.CommandContext(ctx, "docker", "rm", "-f", c.ID).Run()
}
