package codeinterp

import (
	_ "embed"
	"fmt"
)

// The drivers run inside the interpreters. They are shipped in the agent
// binary and sent to the interpreter on fd 3 at start, so nothing needs
// to exist in (or be written to) the sandbox's filesystem.
var (
	//go:embed driver.py
	driverPy []byte
	//go:embed driver.js
	driverJS []byte
)

// driverFile is the file name driver code runs under; the drivers use it
// to drop their own frames from tracebacks.
const driverFile = "<agentbox-driver>"

// pythonBootstrap reads exactly len(driver.py) bytes from fd 3 and runs
// them. A short command line keeps `ps` readable.
func pythonBootstrap() string {
	return fmt.Sprintf("import os\nn=%d;b=b''\nwhile len(b)<n:\n c=os.read(3,n-len(b))\n if not c:raise SystemExit(70)\n b+=c\nexec(compile(b,%q,'exec'))\n",
		len(driverPy), driverFile)
}

// jsBootstrap is the same for node; a direct eval keeps require in scope.
func jsBootstrap() string {
	return fmt.Sprintf("const fs=require('fs');const n=%d;const b=Buffer.alloc(n);let o=0;"+
		"while(o<n){const r=fs.readSync(3,b,o,n-o,null);if(!r)process.exit(70);o+=r}"+
		"eval(b.toString('utf8')+'\\n//# sourceURL=%s')", len(driverJS), driverFile)
}

// driverSource returns the source a driver-protocol language reads first.
func driverSource(l *language) []byte {
	if l.name == "javascript" {
		return driverJS
	}
	return driverPy
}
