// Command pause is the sandbox ("pause") image's only binary on the test
// cluster's real node: it holds a pod's namespaces and does nothing until
// it is told to stop. Built here because the node never pulls an image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}
