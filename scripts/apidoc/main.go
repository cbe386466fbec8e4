// Command apidoc writes docs/api.md from api/openapi.yaml:
//
//	go run ./scripts/apidoc > docs/api.md
package main

import (
	"fmt"
	"os"

	"github.com/agentbox/agentbox/api"
)

func main() {
	ref, err := api.Reference()
	if err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(1)
	}
	fmt.Print(ref)
}
