package sandboxrunner

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/agent/agentclient"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxPasswd bounds the /etc/passwd read to resolve a numeric USER.
const maxPasswd = 4 << 20

// stepUser turns a Dockerfile USER ("name", "uid", "name:group") into the
// account name the agent runs the step as ("" = root, the agent itself).
// The agent switches to the account's own groups; a group given in USER
// is not applied separately.
func stepUser(ctx context.Context, c *agentclient.Client, user string) (string, error) {
	u, _, _ := strings.Cut(user, ":")
	if u == "" || u == "root" || u == "0" {
		return "", nil
	}
	uid, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return u, nil // a name: the agent looks it up
	}
	rc, _, err := c.Download(ctx, "/etc/passwd", "")
	if err != nil {
		return "", fmt.Errorf("USER %s: read /etc/passwd: %w", user, err)
	}
	defer rc.Close()
	sc := bufio.NewScanner(io.LimitReader(rc, maxPasswd))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) >= 3 && f[2] == strconv.FormatUint(uid, 10) && f[0] != "" {
			return f[0], nil
		}
	}
	return "", sandbox.Errorf(sandbox.ClassInvalid, "USER %s: no account with uid %d in the image's /etc/passwd (RUN steps run as an account of the image)", user, uid)
}
