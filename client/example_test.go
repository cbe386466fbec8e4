package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

func Example() {
	ctx := context.Background()
	c, err := client.FromEnv() // AGENTBOX_URL, AGENTBOX_API_KEY
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.Create(ctx, client.CreateRequest{
		Timeout:   10 * time.Minute,
		Resources: &client.Resources{MemoryBytes: 512 << 20, CPUs: 1},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Delete(context.WithoutCancel(ctx), sb.ID)

	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"python3", "-c", "print(6*7)"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
}

func ExampleClient_Run() {
	ctx := context.Background()
	c, _ := client.New("http://127.0.0.1:8000", client.WithAPIKey("my-key"))
	// Output appears as the command produces it; cancelling ctx kills it.
	x, err := c.Run(ctx, "sandbox-id", client.ExecRequest{
		Cmd:     []string{"sh", "-c", "for i in 1 2 3; do echo $i; sleep 1; done"},
		Timeout: 30 * time.Second,
	}, os.Stdout, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	if x.TimedOut {
		log.Printf("timed out after %s", x.Duration())
	}
	os.Exit(x.ExitCode)
}

func ExampleClient_ExecStream() {
	ctx := context.Background()
	c, _ := client.FromEnv()
	s, err := c.ExecStream(ctx, "sandbox-id", client.ExecRequest{Cmd: []string{"make", "test"}})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for ev, err := range s.Events() {
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Type {
		case client.EventStdout, client.EventStderr:
			fmt.Printf("[%s] %s", ev.Type, ev.Data)
		case client.EventExit:
			fmt.Println("exit code", ev.ExitCode)
		}
	}
}

func ExampleClient_ListAll() {
	ctx := context.Background()
	c, _ := client.FromEnv()
	opts := client.ListOptions{States: []string{"running"}, Metadata: map[string]string{"team": "search"}}
	for sb, err := range c.ListAll(ctx, opts) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(sb.ID, time.Until(sb.EndAt).Round(time.Second))
	}
}

func ExampleClient_Upload() {
	ctx := context.Background()
	c, _ := client.FromEnv()
	f, err := os.Open("dataset.csv")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	// Streamed: the file is never held in memory.
	e, err := c.Upload(ctx, "sandbox-id", "/workspace/dataset.csv", f, st.Size(), func(n int64) {
		fmt.Fprintf(os.Stderr, "\r%d / %d bytes", n, st.Size())
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("\nuploaded", e.Path, e.Size)
}

func ExampleClient_Download() {
	ctx := context.Background()
	c, _ := client.FromEnv()
	rc, size, err := c.Download(ctx, "sandbox-id", "/workspace/report.pdf")
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	out, _ := os.Create("report.pdf")
	defer out.Close()
	n, err := out.ReadFrom(rc)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "of", size, "bytes")
}

func ExampleClient_PTY() {
	ctx := context.Background()
	c, _ := client.FromEnv()
	p, err := c.PTY(ctx, "sandbox-id", client.PTYOptions{Cols: 120, Rows: 40})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	go os.Stdout.ReadFrom(p) // terminal output
	p.Write([]byte("ls -la; exit 3\n"))
	code, err := p.Wait()
	fmt.Println("shell exited with", code, err)
}

func ExampleIsNotFound() {
	ctx := context.Background()
	c, _ := client.FromEnv()
	_, err := c.Get(ctx, "no-such-sandbox")
	var apiErr *client.Error
	switch {
	case client.IsNotFound(err):
		fmt.Println("gone")
	case errors.As(err, &apiErr):
		fmt.Println(apiErr.Code, apiErr.Message, apiErr.RequestID)
	case err != nil:
		fmt.Println("cannot reach the server:", err)
	}
}

func ExampleClient_ConnectSession() {
	ctx := context.Background()
	c, _ := client.FromEnv()
	s, err := c.ConnectSession(ctx, "chat-42", client.ConnectSessionRequest{UserID: "alice", Types: []string{"base"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.ReleaseSession(context.WithoutCancel(ctx), "chat-42", "alice")
	res, _ := c.Exec(ctx, s.Sandboxes[0].ID, client.ExecRequest{Cmd: []string{"cat"}, Stdin: strings.Repeat("x", 3)})
	fmt.Println(res.Stdout)
}
